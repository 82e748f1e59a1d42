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
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

from debian_package import free_port, unpack

CACHE = Path(os.environ.get("VLLMOPS_CACHE", Path.home() / ".cache" / "vllmops")) / "registry"
PACKAGE = "docker-registry"


def registry_binary() -> Path:
    binary = CACHE / "root/usr/bin/docker-registry"
    if not binary.exists():
        unpack(PACKAGE, CACHE / "root")
    return binary


class LocalRegistry:
    """Starts the registry on a free port; stops it and removes its storage on exit."""

    def __init__(self) -> None:
        self.port = free_port()
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
