"""Shape checks for the files the tool reads, done before any work.

Every problem is one line that names the file, the key or line, and what was expected, raised
as a ToolError (no traceback, and never blamed on something else, such as the cache). Files are
read only when they are regular files inside the root they belong to (the project, the base):
a symlink out of the project or a FIFO is refused, not followed or waited on.
"""

from __future__ import annotations

import os
import re
import stat
import tomllib
from pathlib import Path
from typing import Any

from .errors import ToolError

SHA256_RE = re.compile(r"[0-9a-f]{64}")
GIT_SHA_RE = re.compile(r"[0-9a-f]{40}")
# a PEP 440 version as it appears in a file name: no path separators, no "..", no spaces
VERSION_RE = re.compile(r"[0-9][0-9A-Za-z.+!_-]*")


def inside(path: Path, root: Path) -> bool:
    """Does ``path``, with every symlink followed, stay within ``root``?"""
    return path.resolve().is_relative_to(root.resolve())


def safe_relpath(rel: str) -> str | None:
    """Why ``rel`` is not a plain relative path that stays where it is put, or None when it is."""
    if not rel:
        return "is empty"
    if rel.startswith("/") or re.match(r"[A-Za-z]:[\\/]", rel):
        return "is an absolute path"
    parts = rel.split("/")
    if ".." in parts:
        return "contains '..'"
    if "\\" in rel or "\0" in rel or any(ord(c) < 32 for c in rel):
        return "contains a backslash or a control character"
    if any(p in ("", ".") for p in parts):
        return "has an empty or '.' component"
    if any(p.lower() == ".git" for p in parts):
        return "has a '.git' component"
    return None


def special(path: Path) -> str | None:
    """The kind of ``path`` when it is neither a regular file, a directory nor a symlink."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return None


def read_text(path: Path, root: Path, what: str) -> str:
    """The UTF-8 text of ``path``, a regular file inside ``root``; ``what`` says what it should hold."""
    if not path.exists() and not path.is_symlink():
        raise ToolError(f"{path}: missing ({what})")
    if not inside(path, root):
        raise ToolError(f"{path}: points outside {root} (to {path.resolve()}); the tool reads only files "
                        "inside the project")
    if not path.is_file():
        target = path.resolve()
        kind = "a directory" if target.is_dir() else (special(target) or "not a regular file")
        raise ToolError(f"{path}: is {kind}, expected a regular file ({what})")
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise ToolError(f"{path}:{line}: not UTF-8 (byte {data[e.start]:#04x} at offset {e.start}); "
                        f"expected UTF-8 text ({what})") from None


def load_toml(path: Path, root: Path, what: str) -> dict[str, Any]:
    try:
        return tomllib.loads(read_text(path, root, what))
    except tomllib.TOMLDecodeError as e:
        raise ToolError(f"{path}: not valid TOML: {e}") from None


def _type_name(value: Any) -> str:
    return {str: "a string", int: "an integer", float: "a number", bool: "a boolean", list: "an array",
            dict: "a table"}.get(type(value), type(value).__name__)


def table(data: dict, key: str, where: Path, required: bool = True) -> dict[str, Any]:
    value = data.get(key)
    if value is None and not required:
        return {}
    if not isinstance(value, dict):
        raise ToolError(f"{where}: [{key}] is {'missing' if value is None else _type_name(value)}, "
                        f"expected a table [{key}]")
    return value


def string(tbl: dict, key: str, where: str, pattern: re.Pattern | None = None, expected: str = "") -> str:
    """``tbl[key]`` as a non-empty string, matching ``pattern`` in full when given."""
    value = tbl.get(key)
    if value is None or value == "":
        raise ToolError(f"{where}.{key}: missing, expected {expected or 'a string'}")
    if not isinstance(value, str):
        raise ToolError(f"{where}.{key}: is {_type_name(value)} ({value!r}), expected {expected or 'a string'}")
    if pattern is not None and not pattern.fullmatch(value):
        raise ToolError(f"{where}.{key}: {value!r} is not {expected}")
    return value


def unknown_keys(tbl: dict, known: tuple[str, ...], where: str) -> None:
    extra = sorted(set(tbl) - set(known))
    if extra:
        raise ToolError(f"{where}: unknown key {extra[0]!r} (expected one of {', '.join(known)})")
