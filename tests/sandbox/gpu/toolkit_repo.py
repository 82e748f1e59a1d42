#!/usr/bin/env python3
"""A local apt repository holding a stand-in `nvidia-container-toolkit`
package (tests only: NVIDIA's repository is unreachable here).

    toolkit_repo.py build      build it if missing, print its directory

The package carries the stand-ins in this directory (nvidia-ctk,
nvidia-container-runtime-hook, nvidia-container-runtime) under /usr/bin,
with the real package's name, so the role installs it exactly as it would
install NVIDIA's. The repository is flat, like NVIDIA's
(`deb [trusted=yes] file:/srv/vllmops-nvidia-repo ./`).
"""

import gzip
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
CACHE = Path(os.environ.get("VLLMOPS_CACHE", Path.home() / ".cache" / "vllmops"))
PACKAGE, VERSION = "nvidia-container-toolkit", "1.17.8-1"
TOOLS = ("nvidia-ctk", "nvidia-container-runtime-hook", "nvidia-container-runtime")


def _recipe_hash() -> str:
    digest = hashlib.sha256(f"{PACKAGE}{VERSION}".encode())
    for tool in (*TOOLS, "toolkit_repo.py"):
        digest.update((HERE / tool).read_bytes())
    return digest.hexdigest()[:12]


def build() -> Path:
    repo = CACHE / f"nvidia-repo-{_recipe_hash()}"
    if (repo / "Packages").exists():
        return repo
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "pkg"
        (root / "DEBIAN").mkdir(parents=True)
        (root / "usr/bin").mkdir(parents=True)
        for tool in TOOLS:
            shutil.copy2(HERE / tool, root / "usr/bin" / tool)
        (root / "DEBIAN/control").write_text(
            f"Package: {PACKAGE}\nVersion: {VERSION}\nArchitecture: all\nMaintainer: vllmops tests <tests@vllmops.invalid>\n"
            "Depends: python3\nSection: utils\nPriority: optional\n"
            "Description: Stand-in NVIDIA container toolkit for vllmops.cluster tests\n"
            " Simulates the toolkit on GPU-less test hosts. Not for real machines.\n")
        repo.mkdir(parents=True, exist_ok=True)
        deb = repo / f"{PACKAGE}_{VERSION}_all.deb"
        subprocess.run(["dpkg-deb", "--root-owner-group", "--build", str(root), str(deb)], check=True,
                       stdout=subprocess.DEVNULL)
        data = deb.read_bytes()
        control = (root / "DEBIAN/control").read_text().rstrip("\n")
        stanza = (f"{control}\nFilename: ./{deb.name}\nSize: {len(data)}\n"
                  f"MD5sum: {hashlib.md5(data).hexdigest()}\nSHA256: {hashlib.sha256(data).hexdigest()}\n\n")
        (repo / "Packages").write_text(stanza)
        (repo / "Packages.gz").write_bytes(gzip.compress(stanza.encode()))
    return repo


if __name__ == "__main__":
    if sys.argv[1:] != ["build"]:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    print(build())
