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
src-*            real vLLM 0.16.0 sources as a checkout (the sdist's tree), not
                 in site-packages, one image per way `import vllm` reaches it:
  src-editable-finder  /opt/vllm, PEP 660 editable install in the venv
                 /opt/vllm-env (VIRTUAL_ENV, PATH) through setuptools' finder
                 MAPPING (pip's default for vLLM's flat layout)
  src-editable-pth     the same through a plain-path __editable__ .pth (compat
                 mode), version 0.16.0+precompiled, the venv on PATH only
  src-egg-link     /opt/vllm, `setup.py develop` into the system Python:
                 vllm.egg-link + easy-install.pth, vllm.egg-info in the checkout
  src-pythonpath   /workspace/vllm on PYTHONPATH, nothing installed
  src-checkout     a bare checkout in /app that nothing points at
ngc-vllm         laid out like NVIDIA's NGC vLLM image: the system NCCL
                 (/usr/lib/<arch>-linux-gnu/libnccl.so.2 -> libnccl.so.2.21.5, a
                 small stand-in holding NCCL's version string), CUDA 12.8 in
                 /usr/local/cuda-12.8 (version.json; /usr/local/cuda -> cuda-12.8)
                 and no CUDA_VERSION in its ENV, real torch metadata (the CPU
                 wheel of /opt/wheels: its dist-info and torch/version.py, as pip
                 installs them), real vLLM 0.33.0 files, and an ENV that bakes
                 NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME, UCX_NET_DEVICES, NCCL_IB_HCA;
                 dpkg's record of libnccl2 as NVIDIA's package leaves it
"""

from __future__ import annotations

import base64
import functools
import hashlib
import io
import json
import platform
import re
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
    """The Debian rootfs the images start from (python3 3.11), built by nodes.py."""
    return nodes.image_base()


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
    digest = hashlib.sha256(nodes.rootfs_hash(nodes.IMAGE_SUITE).encode())
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


TORCH_WHEELS = Path("/opt/wheels")  # pip's find-links on this machine: the CPU torch wheel
NGC_NCCL = "2.21.5"
NGC_CUDA = ("12.8", "12.8.1", "12.8.90")  # directory, toolkit (version.json "cuda"), cudart
NGC_ENV = {"NCCL_SOCKET_IFNAME": "eth0", "GLOO_SOCKET_IFNAME": "eth0", "UCX_NET_DEVICES": "mlx5_0:1",
           "NCCL_IB_HCA": "mlx5_0"}


def _torch_wheel() -> Path:
    found = sorted(TORCH_WHEELS.glob("torch-*.whl"))
    if not found:
        raise SystemExit(f"no torch wheel in {TORCH_WHEELS}: the ngc-vllm image needs one (pip download torch "
                         "--index-url https://download.pytorch.org/whl/cpu --no-deps -d /opt/wheels)")
    return found[-1]


def _ngc_tree(root: Path, version: str) -> None:
    """The files of an NGC-like vLLM image under root (symlinks as the packages install them)."""
    site = root / "usr/local/lib/python3.11/dist-packages"
    vllm_sources.install_layout(version, site)
    with zipfile.ZipFile(_torch_wheel()) as wheel:  # what the probe reads of torch; the 100s of MB of code are not
        wheel.extractall(site, [n for n in wheel.namelist()
                                if n in ("torch/version.py", "torch/__init__.py") or n.split("/")[0].endswith(".dist-info")])
    lib = root / f"usr/lib/{platform.machine()}-linux-gnu"
    lib.mkdir(parents=True)
    # The real library (~200 MB) holds NCCL's banner format and its version string among its read-only data.
    (lib / f"libnccl.so.{NGC_NCCL}").write_bytes(b"\x7fELF\x02\x01\x01" + b"\0" * 4096 + b"NCCL version %s\0"
                                                  + f"{NGC_NCCL}+cuda{NGC_CUDA[0]}\0".encode() + b"\0" * 4096)
    (lib / "libnccl.so.2").symlink_to(f"libnccl.so.{NGC_NCCL}")
    (lib / "libnccl.so").symlink_to("libnccl.so.2")
    cuda = root / f"usr/local/cuda-{NGC_CUDA[0]}"
    (cuda / "lib64").mkdir(parents=True)
    (cuda / "version.json").write_text(json.dumps({
        "cuda": {"name": "CUDA SDK", "version": NGC_CUDA[1]},
        "cuda_cudart": {"name": "CUDA Runtime (cudart)", "version": NGC_CUDA[2]}}, indent=3) + "\n")
    (cuda / f"lib64/libcudart.so.{NGC_CUDA[2]}").write_bytes(b"\x7fELF")
    (cuda / "lib64/libcudart.so.12").symlink_to(f"libcudart.so.{NGC_CUDA[2]}")
    (root / "usr/local/cuda").symlink_to(f"cuda-{NGC_CUDA[0]}")


def build_ngc(base: str, version: str = "0.33.0") -> str:
    tag = "ngc-vllm"
    if _exists(PREFIX + tag):
        return PREFIX + tag
    with tempfile.TemporaryDirectory() as tmp:
        context = Path(tmp)
        _ngc_tree(context / "root", version)
        env = " ".join(f"{k}={v}" for k, v in NGC_ENV.items())
        # NGC images install NCCL from NVIDIA's libnccl2 package: dpkg has its record and its file list.
        arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
        (context / "dpkg-status").write_text(
            f"Package: libnccl2\nStatus: install ok installed\nPriority: optional\nSection: libs\n"
            f"Installed-Size: 312093\nMaintainer: cudatools <cudatools@nvidia.com>\nArchitecture: {arch}\n"
            f"Source: nccl\nVersion: {NGC_NCCL}-1+cuda{NGC_CUDA[0]}\n"
            "Description: NVIDIA Collective Communication Library (NCCL) Runtime\n\n")
        (context / "dpkg-list").write_text("/.\n/usr\n/usr/lib\n" + "".join(
            f"/usr/lib/{platform.machine()}-linux-gnu/{name}\n" for name in (f"libnccl.so.{NGC_NCCL}", "libnccl.so.2")))
        return _build(tag, f"FROM {base}\nCOPY root/ /\nCOPY dpkg-status dpkg-list /tmp/\n"
                      f"RUN cat /tmp/dpkg-status >> /var/lib/dpkg/status && "
                      f"mv /tmp/dpkg-list /var/lib/dpkg/info/libnccl2:{arch}.list && rm /tmp/dpkg-status\n"
                      f"ENV NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=compute,utility NCCL_VERSION={NGC_NCCL} {env}\n"
                      'ENTRYPOINT ["/opt/nvidia/nvidia_entrypoint.sh"]\n', context)


SOURCE_VERSION = "0.16.0"
SOURCE_VENV = "/opt/vllm-env"
SOURCE_SITE = f"{SOURCE_VENV}/lib/python3.11/site-packages"


def _record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def _checkout(version: str, target: Path) -> None:
    """The sdist's whole tree (vllm/ with setuptools-scm's vllm/_version.py, pyproject.toml, setup.py, csrc/...)."""
    prefix = f"vllm-{version}/"
    with tarfile.open(vllm_sources.fetch(version)) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(prefix) and (m.isfile() or m.isdir())]
        for member in members:
            member.name = member.name[len(prefix):]
        tar.extractall(target, members=members, filter="data")


def _pep660_files(site: Path, dist_version: str, project: str, finder: bool) -> None:
    """What `pip install -e` (pip 26.3, setuptools 84.2.1; PEP 660) writes into site-packages, byte for byte as
    observed for a tiny flat-layout package named vllm: `__editable__.<name>-<version>.pth` holding either the
    project directory (compat mode, or a src layout) or, by default for a flat layout like vLLM's, the line that
    imports setuptools' finder `__editable___<name>_<version>_finder.py` (its MAPPING names the package
    directory; the module text is setuptools' own template), and `<name>-<version>.dist-info` with
    direct_url.json `{"dir_info": {"editable": true}, "url": "file://<project>"}`."""
    from setuptools.command.editable_wheel import _finder_template  # the finder setuptools writes

    dist = f"vllm-{dist_version}"
    pth_name = f"__editable__.{dist}.pth"
    written = {}
    if finder:
        module = "__editable___" + re.sub(r"\W", "_", dist) + "_finder"
        written[pth_name] = f"import {module}; {module}.install()".encode()
        written[f"{module}.py"] = _finder_template(f"__editable__.{dist}.finder", {"vllm": f"{project}/vllm"},
                                                   {}).encode()
    else:
        written[pth_name] = f"{project}\n".encode()
    with tarfile.open(vllm_sources.fetch(SOURCE_VERSION)) as tar:
        metadata = tar.extractfile(f"vllm-{SOURCE_VERSION}/PKG-INFO").read()
    metadata = metadata.replace(f"Version: {SOURCE_VERSION}\n".encode(), f"Version: {dist_version}\n".encode(), 1)
    info = f"{dist}.dist-info"
    written.update({
        f"{info}/METADATA": metadata, f"{info}/INSTALLER": b"pip\n", f"{info}/REQUESTED": b"",
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: setuptools (84.2.1)\nRoot-Is-Purelib: true\nTag: py3-none-any\n\n",
        f"{info}/direct_url.json": json.dumps({"dir_info": {"editable": True}, "url": f"file://{project}"}).encode(),
        f"{info}/entry_points.txt": b"[console_scripts]\nvllm = vllm.entrypoints.cli.main:main\n",
        f"{info}/top_level.txt": b"vllm\n",
    })
    for rel, data in written.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_bytes(data)
    (site / info / "RECORD").write_text("".join(_record_line(rel, data) + "\n" for rel, data in written.items())
                                        + f"{info}/RECORD,,\n")


def _egg_link_files(site: Path, checkout: Path, project: str) -> None:
    """What `setup.py develop` (setuptools 63.4.3, as pip < 21.3 ran it for `pip install -e`) leaves, as observed:
    site-packages/vllm.egg-link `<project>\\n.`, a `<project>` line in easy-install.pth, and
    <project>/vllm.egg-info (PKG-INFO with the version)."""
    site.mkdir(parents=True, exist_ok=True)
    (site / "vllm.egg-link").write_text(f"{project}\n.")
    (site / "easy-install.pth").write_text(f"{project}\n")
    egg_info = checkout / "vllm.egg-info"
    egg_info.mkdir(exist_ok=True)  # the sdist has one already; develop rewrites it
    (egg_info / "PKG-INFO").write_bytes((checkout / "PKG-INFO").read_bytes())
    (egg_info / "top_level.txt").write_text("vllm\n")
    (egg_info / "dependency_links.txt").write_text("\n")
    (egg_info / "SOURCES.txt").write_text("setup.py\nvllm/__init__.py\n")


_VENV_PATH = f"{SOURCE_VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# name -> (checkout directory, install, ENV)
SOURCE_LAYOUTS = {
    "src-editable-finder": ("/opt/vllm", "finder", f"VIRTUAL_ENV={SOURCE_VENV} PATH={_VENV_PATH}"),
    "src-editable-pth": ("/opt/vllm", "pth", f"PATH={_VENV_PATH}"),
    "src-egg-link": ("/opt/vllm", "egg-link", ""),
    "src-pythonpath": ("/workspace/vllm", None, "PYTHONPATH=/workspace/vllm"),
    "src-checkout": ("/app", None, ""),
}


def build_source_layouts(base: str) -> dict:
    """vLLM as a source checkout, reached through each install layout (see the module's docstring)."""
    built = {}
    for name, (project, install, env) in SOURCE_LAYOUTS.items():
        built[name] = PREFIX + name
        if _exists(PREFIX + name):
            continue
        with tempfile.TemporaryDirectory() as tmp:
            context = Path(tmp)
            checkout = context / "root" / project.lstrip("/")
            _checkout(SOURCE_VERSION, checkout)
            steps = [f"FROM {base}"]
            if install in ("finder", "pth"):
                # A real venv of the image's Python (no pip: Debian keeps ensurepip in python3-venv).
                steps.append(f"RUN python3 -m venv --without-pip {SOURCE_VENV}")
                dist_version = SOURCE_VERSION if install == "finder" else SOURCE_VERSION + "+precompiled"
                _pep660_files(context / "root" / SOURCE_SITE.lstrip("/"), dist_version, project, install == "finder")
                script = context / "root" / SOURCE_VENV.lstrip("/") / "bin/vllm"
                script.parent.mkdir(parents=True)
                script.write_text(f"#!{SOURCE_VENV}/bin/python3\n# -*- coding: utf-8 -*-\nimport re\nimport sys\n"
                                  "from vllm.entrypoints.cli.main import main\nif __name__ == '__main__':\n"
                                  "    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])\n"
                                  "    sys.exit(main())\n")
                script.chmod(0o755)
            elif install == "egg-link":
                _egg_link_files(context / "root/usr/local/lib/python3.11/dist-packages", checkout, project)
            steps.append("COPY root/ /")
            if env:
                steps.append(f"ENV {env}")
            if project == "/app":
                steps.append("WORKDIR /app")
            steps.append('ENTRYPOINT ["vllm", "serve"]' if install in ("finder", "pth")
                         else 'ENTRYPOINT ["python3", "-m", "vllm.entrypoints.openai.api_server"]')
            _build(name, "\n".join(steps) + "\n", context)
    return built


def build_all() -> dict:
    base = rootfs_image()
    images = {f"vllm-{v}": build_vllm(v, base) for v in vllm_sources.TESTED_VERSIONS}
    images["big"] = build_big(images["vllm-0.16.0"])
    images.update(build_simple(base))
    images.update(build_layout_variants(base, images["vllm-0.16.0"]))
    images["foreign-arch"] = build_foreign_arch("0.16.0")
    images.update(build_source_layouts(base))
    images["ngc-vllm"] = build_ngc(base)
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
