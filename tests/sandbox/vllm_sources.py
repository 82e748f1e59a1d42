#!/usr/bin/env python3
"""Real vLLM source distributions from PyPI, for tests and test images.

    vllm_sources.py fetch [VERSION ...]     download (cached), print the paths
    vllm_sources.py site-packages VERSION DIR
                                            lay the version out in DIR the way
                                            `pip install` does: DIR/vllm/... and
                                            DIR/vllm-VERSION.dist-info/METADATA

Downloads go to ~/.cache/vllmops/vllm (VLLMOPS_CACHE overrides the root) and
are checked against PyPI's sha256. Nothing downloaded is ever committed.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tarfile
import urllib.request
from pathlib import Path

CACHE = Path(os.environ.get("VLLMOPS_CACHE", Path.home() / ".cache" / "vllmops")) / "vllm"
INDEX = "https://pypi.org/simple/vllm/"

# One per era the probe must understand (issue: 0.6.x, 0.8-0.11, 0.16-0.17, newest).
TESTED_VERSIONS = ("0.6.3.post1", "0.10.2", "0.16.0", "0.33.0")


def _index() -> list[dict]:
    req = urllib.request.Request(INDEX, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.load(resp)["files"]


def fetch(version: str) -> Path:
    """Path of the sdist of this version, downloading it once."""
    target = CACHE / f"vllm-{version}.tar.gz"
    if target.exists():
        return target
    entry = next((f for f in _index() if f["filename"] == target.name), None)
    if entry is None:
        raise SystemExit(f"vllm {version}: no sdist {target.name} on PyPI")
    CACHE.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".part")
    digest = hashlib.sha256()
    with urllib.request.urlopen(entry["url"], timeout=300) as resp, open(partial, "wb") as out:
        while chunk := resp.read(1 << 20):
            digest.update(chunk)
            out.write(chunk)
    if digest.hexdigest() != entry["hashes"]["sha256"]:
        partial.unlink()
        raise SystemExit(f"vllm {version}: sha256 mismatch for {entry['url']}")
    partial.rename(target)
    return target


def install_layout(version: str, site_packages: Path) -> Path:
    """Place vllm/ and its dist-info under site_packages as pip would."""
    sdist = fetch(version)
    prefix = f"vllm-{version}/"
    with tarfile.open(sdist) as tar:
        members = [m for m in tar.getmembers()
                   if m.name.startswith(prefix + "vllm/") and (m.isfile() or m.isdir())]
        for member in members:
            member.name = member.name[len(prefix):]
        tar.extractall(site_packages, members=members, filter="data")
        pkg_info = tar.extractfile(prefix + "PKG-INFO").read()
    dist_info = site_packages / f"vllm-{version}.dist-info"
    dist_info.mkdir(parents=True, exist_ok=True)
    (dist_info / "METADATA").write_bytes(pkg_info)
    (dist_info / "INSTALLER").write_text("pip\n")
    return site_packages / "vllm"


def main(argv: list[str]) -> int:
    if argv[:1] == ["fetch"]:
        for version in argv[1:] or TESTED_VERSIONS:
            print(fetch(version))
        return 0
    if argv[:1] == ["site-packages"] and len(argv) == 3:
        target = Path(argv[2])
        if (target / "vllm").exists():
            shutil.rmtree(target / "vllm")
        print(install_layout(argv[1], target))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
