#!/usr/bin/env python3
"""Images the image_probe tests and benchmark run against, built locally on
the node rootfs (no registry is reachable). Rebuilt when missing or built from
another recipe (the label io.vllmops.test.probe-recipe).

    probe_images.py build        build every image, print name -> image ID as JSON
    probe_images.py remove       remove them (by name)

vllm-<version>   real vLLM sources of that version laid out as pip installs them
                 (0.33.0 also holds real ray and transformers wheels, unpacked
                 the way pip installs them; 0.10.2 lives in a venv under /opt)
big              vllm-0.16.0 plus 40 more layers and a 2 GiB filler layer
no-vllm          Python, no vLLM
no-python        a static busybox and nothing else
foreign-arch     vLLM files in an image labelled for another CPU architecture
                 (arm64 on amd64 hosts, amd64 elsewhere; docker load of a
                 hand-made archive: Docker 20.10 cannot build foreign images)
deleted-vllm     vLLM installed, then removed in a later layer (a whiteout)
symlinked        site-packages reached through a symlink, vLLM in an opaque
                 directory that replaced an earlier one
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import platform
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import nodes
import vllm_sources

PREFIX = "vllmops-test/probe-"
WHEELS = {  # real packages for the "packages" report, installed from their wheels
    "ray": "2.40.0",
    "transformers": "4.46.3",
}


def _docker(*args: str, stdin: bytes | None = None) -> str:
    proc = subprocess.run(["docker", *args], input=stdin, capture_output=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"docker {' '.join(args[:3])} failed: {proc.stderr.decode()[-1500:]}")
    return proc.stdout.decode()


def rootfs_image() -> str:
    """The node image's Debian rootfs (python3 3.11), built by nodes.py."""
    nodes.build_image()
    return f"{nodes.IMAGE_REPO}-rootfs:{nodes.recipe_hash()}"


def _wheel(name: str, version: str) -> Path:
    cache = vllm_sources.CACHE.parent / "wheels"
    cache.mkdir(parents=True, exist_ok=True)
    found = sorted(cache.glob(f"{name}-{version}-*.whl"))
    if not found:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary", ":all:",
                        "--python-version", "3.11", "--platform", f"manylinux2014_{platform.machine()}", "-d", str(cache),
                        f"{name}=={version}"], check=True)
        found = sorted(cache.glob(f"{name}-{version}-*.whl"))
    return found[0]


@functools.cache
def recipe_hash() -> str:
    """What the images are made from: the node rootfs they start from, this file and the vLLM layouts it installs.
    An image built from another recipe (another branch, an older checkout) is rebuilt rather than trusted by its
    name. Computed once per run."""
    here = Path(__file__).resolve().parent
    digest = hashlib.sha256(nodes.recipe_hash().encode())
    for source in ("probe_images.py", "vllm_sources.py"):
        digest.update((here / source).read_bytes())
    return digest.hexdigest()[:16]


RECIPE_LABEL = "io.vllmops.test.probe-recipe"


def _build(name: str, dockerfile: str, context: Path) -> str:
    tag = f"{PREFIX}{name}"
    (context / "Dockerfile").write_text(dockerfile)
    _docker("build", "--quiet", "--label", "io.vllmops.test=probe", "--label", f"{RECIPE_LABEL}={recipe_hash()}",
            "-t", tag, str(context))
    return tag


def _exists(tag: str) -> bool:
    """The image is there and was built from this recipe."""
    proc = subprocess.run(["docker", "image", "inspect", "--format", f'{{{{index .Config.Labels "{RECIPE_LABEL}"}}}}',
                           tag], capture_output=True, text=True)
    return proc.returncode == 0 and proc.stdout.strip() == recipe_hash()


def build_vllm(version: str, base: str) -> str:
    tag = f"vllm-{version}"
    if _exists(PREFIX + tag):
        return PREFIX + tag
    with tempfile.TemporaryDirectory() as tmp:
        context = Path(tmp)
        site = context / "site"
        vllm_sources.install_layout(version, site)
        if version == "0.10.2":
            target, extra = "/opt/venv/lib/python3.11/site-packages", (
                'ENV VIRTUAL_ENV=/opt/venv PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n'
                'ENTRYPOINT ["vllm", "serve"]\n')
        elif version.startswith("0.6."):
            target, extra = "/usr/local/lib/python3.11/dist-packages", (
                'ENTRYPOINT ["python3", "-m", "vllm.entrypoints.openai.api_server"]\n')
        else:
            target, extra = "/usr/local/lib/python3.11/dist-packages", 'ENTRYPOINT ["vllm", "serve"]\n'
        if version == vllm_sources.TESTED_VERSIONS[-1]:
            for package, package_version in WHEELS.items():
                with zipfile.ZipFile(_wheel(package, package_version)) as wheel:
                    wheel.extractall(site)
        extra = "ENV CUDA_VERSION=12.8.1 NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=compute,utility\n" + extra
        return _build(tag, f"FROM {base}\nCOPY site/ {target}/\n{extra}", context)


def build_big(small: str) -> str:
    if _exists(PREFIX + "big"):
        return PREFIX + "big"
    layers = "".join(f"RUN echo layer {i} > /etc/vllmops-layer-{i}\n" for i in range(40))
    with tempfile.TemporaryDirectory() as tmp:
        return _build("big", f"FROM {small}\n{layers}"
                      "RUN head -c 2147483648 /dev/urandom > /opt/filler.bin\n", Path(tmp))


def build_simple(base: str) -> dict:
    built = {}
    with tempfile.TemporaryDirectory() as tmp:
        context = Path(tmp)
        if not _exists(PREFIX + "no-vllm"):
            _build("no-vllm", f"FROM {base}\nENTRYPOINT [\"python3\"]\n", context)
        built["no-vllm"] = PREFIX + "no-vllm"
        if not _exists(PREFIX + "no-python"):
            _build("no-python", f"FROM {base} AS source\nFROM scratch\n"
                   "COPY --from=source /bin/busybox /bin/busybox\nENTRYPOINT [\"/bin/busybox\", \"sh\"]\n", context)
        built["no-python"] = PREFIX + "no-python"
    return built


def build_layout_variants(base: str, vllm_image: str) -> dict:
    """Layouts that exercise overlay whiteouts, opaque directories and symlinks."""
    site = "/usr/local/lib/python3.11/dist-packages"
    built = {}
    with tempfile.TemporaryDirectory() as tmp:
        if not _exists(PREFIX + "deleted-vllm"):
            _build("deleted-vllm", f"FROM {vllm_image}\nRUN rm -rf {site}/vllm {site}/vllm-*.dist-info\n", Path(tmp))
        built["deleted-vllm"] = PREFIX + "deleted-vllm"
        if not _exists(PREFIX + "symlinked"):
            _build("symlinked", f"FROM {vllm_image}\n"
                   f"RUN mkdir -p /srv/pkgs && mv {site}/* /srv/pkgs/ && rm -rf {site} && ln -s /srv/pkgs {site}\n"
                   "RUN mkdir -p /srv/old/vllm && echo broken > /srv/old/vllm/__init__.py\n"
                   "RUN rm -rf /srv/old && mkdir -p /srv/old && echo fresh > /srv/old/README\n", Path(tmp))
        built["symlinked"] = PREFIX + "symlinked"
    return built


FOREIGN_ARCH = "arm64" if platform.machine() in ("x86_64", "amd64") else "amd64"


def build_foreign_arch(version: str) -> str:
    """An image for another CPU architecture, loaded from a hand-made `docker save` archive."""
    tag = PREFIX + "foreign-arch"
    if _exists(tag):
        return tag
    with tempfile.TemporaryDirectory() as tmp:
        site = Path(tmp) / "usr/local/lib/python3.12/site-packages"
        vllm_sources.install_layout(version, site)
        layer = io.BytesIO()
        with tarfile.open(fileobj=layer, mode="w") as tar:
            tar.add(Path(tmp) / "usr", arcname="usr")
        layer_bytes = layer.getvalue()
        diff_id = "sha256:" + hashlib.sha256(layer_bytes).hexdigest()
        config = json.dumps({
            "architecture": FOREIGN_ARCH, "os": "linux",
            "config": {"Entrypoint": ["vllm", "serve"], "Env": ["PATH=/usr/local/bin:/usr/bin:/bin"],
                       "Labels": {"io.vllmops.test": "probe", RECIPE_LABEL: recipe_hash()}},
            "rootfs": {"type": "layers", "diff_ids": [diff_id]},
            "history": [{"created_by": "vllmops tests: vLLM files for a foreign CPU architecture"}],
        }).encode()
        config_name = hashlib.sha256(config).hexdigest() + ".json"
        manifest = json.dumps([{"Config": config_name, "RepoTags": [tag + ":latest"], "Layers": ["layer/layer.tar"]}]).encode()
        archive = io.BytesIO()
        with tarfile.open(fileobj=archive, mode="w") as tar:
            for name, data in ((config_name, config), ("manifest.json", manifest), ("layer/layer.tar", layer_bytes)):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        _docker("load", "--quiet", stdin=archive.getvalue())
    return tag


def build_all() -> dict:
    base = rootfs_image()
    images = {f"vllm-{v}": build_vllm(v, base) for v in vllm_sources.TESTED_VERSIONS}
    images["big"] = build_big(images["vllm-0.16.0"])
    images.update(build_simple(base))
    images.update(build_layout_variants(base, images["vllm-0.16.0"]))
    images["foreign-arch"] = build_foreign_arch("0.16.0")
    return images


def remove_all() -> None:
    names = _docker("images", "--filter", f"reference={PREFIX}*", "--format", "{{.Repository}}:{{.Tag}}").split()
    if names:
        _docker("rmi", "-f", *names)


def main(argv: list[str]) -> int:
    if argv == ["build"]:
        print(json.dumps(build_all(), indent=1))
        return 0
    if argv == ["remove"]:
        remove_all()
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
