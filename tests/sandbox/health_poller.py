"""An endpoint's health asked every 0.2 s while a block runs: how many
answers were healthy and how many failed (the outage a user would see)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class HealthPoller:
    def __init__(self, healthy: Callable[[], bool], interval_s: float = 0.2) -> None:
        self.healthy, self.interval_s, self.ok, self.failed = healthy, interval_s, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            if self.healthy():
                self.ok += 1
            else:
                self.failed += 1
            time.sleep(self.interval_s)

    def __enter__(self) -> HealthPoller:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
