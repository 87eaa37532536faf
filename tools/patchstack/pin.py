"""Read VERSION: the overlay's version and the pinned upstream base."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

from .errors import ToolError

REQUIRED_BASE_KEYS = ("vllm", "commit", "sdist", "sdist_sha256", "wheel", "wheel_sha256")


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
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ToolError(f"{path}: missing (it pins the upstream base)") from None
    except tomllib.TOMLDecodeError as e:
        raise ToolError(f"{path}: not valid TOML: {e}") from None
    base = data.get("base", {})
    missing = [k for k in REQUIRED_BASE_KEYS if not base.get(k)]
    if missing or not data.get("overlay", {}).get("version"):
        what = ", ".join([f"[base].{k}" for k in missing] or ["[overlay].version"])
        raise ToolError(f"{path}: missing {what}")
    return Pin(overlay_version=data["overlay"]["version"], **{k: str(base[k]) for k in REQUIRED_BASE_KEYS})
