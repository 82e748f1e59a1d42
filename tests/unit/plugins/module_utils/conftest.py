"""The fake Docker Engine every client-side test here talks to."""

import os
import tempfile

import pytest
from fake_engine import FakeEngine


@pytest.fixture
def engine():
    # A short directory: a unix socket path must stay under 108 bytes.
    with tempfile.TemporaryDirectory(prefix="vllmops-engine-") as tmp, FakeEngine(os.path.join(tmp, "docker.sock")) as fake:
        yield fake
