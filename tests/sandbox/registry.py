#!/usr/bin/env python3
"""A real Docker registry (Debian's docker-registry, CNCF distribution) on 127.0.0.1,
for tests of the nodes' `docker pull` path. Docker trusts registries on
127.0.0.0/8 without TLS, so no daemon setting changes.

    with LocalRegistry() as address:      # "127.0.0.1:PORT", storage in a temp dir
        ...

The package is fetched once with `apt-get download` and unpacked (not
installed: no service of its own starts) under ~/.cache/vllmops/registry
(VLLMOPS_CACHE overrides the root).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

CACHE = Path(os.environ.get("VLLMOPS_CACHE", Path.home() / ".cache" / "vllmops")) / "registry"
PACKAGE = "docker-registry"


def registry_binary() -> Path:
    binary = CACHE / "root/usr/bin/docker-registry"
    if binary.exists():
        return binary
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        download = ["apt-get", "download", "-qq", PACKAGE]
        if subprocess.run(download, cwd=tmp, capture_output=True).returncode != 0:
            subprocess.run(["apt-get", "update", "-qq"], check=True, capture_output=True)
            subprocess.run(download, cwd=tmp, check=True, capture_output=True)
        deb = next(Path(tmp).glob(f"{PACKAGE}_*.deb"))
        shutil.rmtree(CACHE / "root", ignore_errors=True)
        subprocess.run(["dpkg-deb", "-x", str(deb), str(CACHE / "root")], check=True)
    return binary


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class LocalRegistry:
    """Starts the registry on a free port; stops it and removes its storage on exit."""

    def __init__(self) -> None:
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.tmp = tempfile.TemporaryDirectory(prefix="vllmops-registry-")
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> str:
        config = Path(self.tmp.name) / "config.yml"
        config.write_text(
            "version: 0.1\n"
            "log: {level: error}\n"
            f"storage: {{filesystem: {{rootdirectory: {self.tmp.name}/data}}, delete: {{enabled: true}}}}\n"
            f"http: {{addr: '{self.address}'}}\n")
        self.log = Path(self.tmp.name) / "registry.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen([str(registry_binary()), "serve", str(config)], stdin=subprocess.DEVNULL,
                                         stdout=out, stderr=out)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://{self.address}/v2/", timeout=2):
                    return self.address
            except OSError:
                if self.proc.poll() is not None:
                    break
                time.sleep(0.2)
        log = self.log.read_text(errors="replace")[-2000:]
        self.__exit__()
        raise RuntimeError(f"docker-registry did not answer on {self.address}: {log}")

    def __exit__(self, *exc) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
        self.tmp.cleanup()
