#!/usr/bin/env python3
"""A real Prometheus for the tests: Debian's `prometheus` package (Prometheus
and promtool) unpacked - not installed, so no service starts on this machine -
into ~/.cache/vllmops/prometheus.

    python3 tests/sandbox/prometheus.py bin    # prints the directory holding prometheus and promtool
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

from debian_package import free_port, unpack

CACHE = Path.home() / ".cache/vllmops/prometheus"


def ensure() -> Path:
    """The directory with prometheus and promtool, downloaded and unpacked once."""
    bin_dir = CACHE / "root/usr/bin"
    if not ((bin_dir / "prometheus").exists() and (bin_dir / "promtool").exists()):
        unpack("prometheus", CACHE / "root")
    return bin_dir


class Prometheus:
    """prometheus --config.file=CONFIG on 127.0.0.1, its data in a temporary directory."""

    def __init__(self, config: Path) -> None:
        self.config = config
        self.port = free_port()
        self.data = Path(tempfile.mkdtemp(prefix="vllmops-prometheus-data-"))
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> Prometheus:
        self.log = open(self.data / "prometheus.log", "w")
        self.proc = subprocess.Popen([str(ensure() / "prometheus"), f"--config.file={self.config}",
                                      f"--storage.tsdb.path={self.data / 'tsdb'}",
                                      f"--web.listen-address=127.0.0.1:{self.port}"],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        return self

    def __exit__(self, *exc) -> None:
        if self.proc:
            self.proc.terminate()
            self.proc.wait(timeout=30)
        self.log.close()
        shutil.rmtree(self.data, ignore_errors=True)

    def log_text(self) -> str:
        return (self.data / "prometheus.log").read_text()[-4000:]

    def query(self, expr: str) -> list[dict]:
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(url, timeout=10) as response:
            return json.load(response)["data"]["result"]

    def wait(self, expr: str, count: int, timeout: float = 90) -> list[dict]:
        """The result of expr once it has `count` series with value 1 (up == 1 for every target)."""
        deadline, result = time.monotonic() + timeout, []
        while time.monotonic() < deadline:
            try:
                result = self.query(expr)
            except OSError:
                result = []
            if len([s for s in result if s["value"][1] == "1"]) >= count:
                return result
            time.sleep(1)
        raise AssertionError(f"{expr}: {result} after {timeout} s; Prometheus's log:\n{self.log_text()}")


if __name__ == "__main__":
    if sys.argv[1:] == ["bin"]:
        print(ensure())
    else:
        sys.exit(__doc__)
