"""Read VERSION: the overlay's version and the pinned upstream base."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from . import schema

REQUIRED_BASE_KEYS = ("vllm", "commit", "sdist", "sdist_sha256", "wheel", "wheel_sha256")
_FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+!-]*")
_SHORT_SHA = re.compile(r"[0-9a-f]{7,40}")
# the shape of every [base] key: (pattern, what the message says was expected)
BASE_SHAPE = {
    "vllm": (schema.VERSION_RE, "a version like 0.34.0"),
    "commit": (_SHORT_SHA, "an upstream commit id (7 to 40 lowercase hex digits)"),
    "sdist": (_FILE_NAME, "a file name like vllm-0.34.0.tar.gz (no directories)"),
    "sdist_sha256": (schema.SHA256_RE, "a sha256: 64 lowercase hex digits"),
    "wheel": (_FILE_NAME, "a wheel file name (no directories)"),
    "wheel_sha256": (schema.SHA256_RE, "a sha256: 64 lowercase hex digits"),
}


@dataclass(frozen=True)
class Pin:
    overlay_version: str
    vllm: str
    commit: str
    sdist: str
    sdist_sha256: str
    wheel: str
    wheel_sha256: str


def read_pin(path: Path) -> Pin:
    """VERSION, checked key by key; a wrong shape names the key and what was expected."""
    data = schema.load_toml(path, path.parent, "the pin of the upstream base, TOML")
    overlay = schema.table(data, "overlay", path)
    base = schema.table(data, "base", path)
    version = schema.string(overlay, "version", f"{path}: [overlay]", expected="a version string like 0.34.0+dspark.1")
    values = {k: schema.string(base, k, f"{path}: [base]", *BASE_SHAPE[k]) for k in REQUIRED_BASE_KEYS}
    return Pin(overlay_version=version, **values)
