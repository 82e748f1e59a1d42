"""What the unit tests share."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest


def _load_script(name: str, path: Path):
    """A Python file that is not on sys.path (a role's file, a sandbox script) as a fresh module."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def load_script():
    return _load_script
