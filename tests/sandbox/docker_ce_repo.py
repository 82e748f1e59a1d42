#!/usr/bin/env python3
"""A local apt repository holding a stand-in `docker-ce` (tests only: Docker's
repository is unreachable here).

    docker_ce_repo.py build      build it if missing, print its directory

The stand-in is Debian's docker.io (the engine this machine's mirror has)
under the name and the conflicts of Docker's package - `Conflicts:
docker.io` - so that installing docker.io next to it makes apt remove it,
as on a real docker-ce host. The repository also holds every package it
depends on, so a node installs it without the mirror, in seconds. Flat, like
the stand-in toolkit's: `deb [trusted=yes] file:/srv/vllmops-docker-ce-repo ./`.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

CACHE = Path(os.environ.get("VLLMOPS_CACHE", Path.home() / ".cache" / "vllmops"))
SOURCE, PACKAGE = "docker.io", "docker-ce"
CONFLICTS = "docker.io, docker-engine"
# What `apt-cache depends` may follow: not Recommends, Suggests or the negative relations.
DEPENDS = ["apt-cache", "depends", "--recurse", "--no-recommends", "--no-suggests", "--no-conflicts",
           "--no-breaks", "--no-replaces", "--no-enhances"]


def _apt(*argv: str, cwd: Path | None = None) -> str:
    """apt's answer; its lists are refreshed once when the first try fails."""
    env = dict(os.environ, LC_ALL="C", LANGUAGE="C")
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, env=env)
    if proc.returncode:
        subprocess.run(["apt-get", "update", "-qq"], check=True, capture_output=True)
        proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, env=env, check=True)
    return proc.stdout


def _candidate(package: str) -> str:
    return re.search(r"^Version: (\S+)", _apt("apt-cache", "show", "--no-all-versions", package), re.M).group(1)


def _closure(package: str) -> list[str]:
    """The package and everything it depends on, recursively (real packages only)."""
    lines = _apt(*DEPENDS, package).splitlines()
    return sorted({line for line in lines if line and not line.startswith((" ", "<"))})


def _rename(deb: Path, out: Path) -> None:
    """docker.io's files and scripts, as docker-ce conflicting with docker.io."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "pkg"
        subprocess.run(["dpkg-deb", "--raw-extract", str(deb), str(root)], check=True)
        control = root / "DEBIAN" / "control"
        fields = re.sub(r"^Package: .*$", f"Package: {PACKAGE}", control.read_text(), count=1, flags=re.M)
        fields = re.sub(r"^(Conflicts|Replaces|Provides|Breaks): .*\n", "", fields, flags=re.M)
        control.write_text(fields.rstrip("\n") + f"\nConflicts: {CONFLICTS}\n")
        # gzip -1: dpkg-deb's default xz takes minutes over the engine's binaries.
        subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "-z1", "--build", str(root), str(out)], check=True,
                       stdout=subprocess.DEVNULL)


def _index(repo: Path) -> None:
    """Packages and Packages.gz of a flat repository, from the .deb files in it."""
    stanzas = []
    for deb in sorted(repo.glob("*.deb")):
        data = deb.read_bytes()
        control = subprocess.run(["dpkg-deb", "--field", str(deb)], check=True, capture_output=True,
                                 text=True).stdout.rstrip("\n")
        stanzas.append(f"{control}\nFilename: ./{deb.name}\nSize: {len(data)}\n"
                       f"MD5sum: {hashlib.md5(data).hexdigest()}\nSHA256: {hashlib.sha256(data).hexdigest()}\n")
    text = "\n".join(stanzas) + "\n"
    (repo / "Packages").write_text(text)
    (repo / "Packages.gz").write_bytes(gzip.compress(text.encode()))


def build() -> Path:
    recipe = hashlib.sha256(Path(__file__).read_bytes() + _candidate(SOURCE).encode()).hexdigest()[:12]
    repo = CACHE / f"docker-ce-repo-{recipe}"
    if (repo / "Packages").exists():
        return repo
    partial = repo.with_name(repo.name + ".part")
    subprocess.run(["rm", "-rf", str(partial)], check=True)
    partial.mkdir(parents=True)
    _apt("apt-get", "-o", "APT::Sandbox::User=root", "download", "-qq", *_closure(SOURCE), cwd=partial)
    source = next(partial.glob(f"{SOURCE}_*.deb"))
    _rename(source, partial / source.name.replace(SOURCE, PACKAGE, 1))
    source.unlink()
    _index(partial)
    partial.rename(repo)
    return repo


if __name__ == "__main__":
    if sys.argv[1:] != ["build"]:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    print(build())
