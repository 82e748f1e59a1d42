"""Debian packages the tests run a program from (Prometheus, a Docker
registry): fetched with `apt-get download` and unpacked with `dpkg-deb -x`
into a cache - never installed, so no service of theirs starts here."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
from pathlib import Path


def unpack(package: str, root: Path) -> Path:
    """The package's files under root (replaced whole), downloaded once more;
    apt's lists are refreshed when the first download fails."""
    with tempfile.TemporaryDirectory(prefix=f"vllmops-{package}-") as tmp:
        download = ["apt-get", "-o", "APT::Sandbox::User=root", "download", "-qq", package]
        if subprocess.run(download, cwd=tmp, capture_output=True).returncode != 0:
            subprocess.run(["apt-get", "update", "-qq"], check=True, capture_output=True)
            subprocess.run(download, cwd=tmp, check=True, capture_output=True)
        deb = next(Path(tmp).glob(f"{package}_*.deb"))
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
    return root


def free_port() -> int:
    """A TCP port nothing listens on at 127.0.0.1 right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
