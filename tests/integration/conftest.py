"""Integration tests: the real series on real vLLM sdists from PyPI (downloaded once into the user
cache dir, ~50 MB each; every later run reuses it)."""

from __future__ import annotations

from pathlib import Path

import pytest
from patchstack import sources
from patchstack.pin import read_pin

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def pin():
    return read_pin(ROOT / "VERSION")


@pytest.fixture(scope="session")
def base_0340(pin):
    return sources.resolve("", pin)


@pytest.fixture(scope="session")
def base_0330(pin):
    return sources.resolve("pypi:0.33.0", pin)
