"""Whole files copied over the patched tree, each with a manifest entry.

``overlay/manifest.toml`` lists every file under ``overlay/`` by its path in the tree
(``overlay/vllm/x.py`` lands at ``vllm/x.py``): ``kind = "new"`` for a file upstream does not
have, ``kind = "replace"`` with ``upstream_blob`` for a fork of an upstream file. A replaced
file whose upstream blob changed, or a new file upstream now also has, is a conflict: copying
it would silently revert upstream's fixes.
"""

from __future__ import annotations

import shutil
import tomllib
from dataclasses import dataclass
from pathlib import Path

from . import git, hunks
from .errors import ToolError

MANIFEST = "manifest.toml"


@dataclass
class Entry:
    path: str  # path in the tree, e.g. vllm/v1/x.py
    kind: str  # new | replace
    upstream_blob: str | None = None


def read_manifest(overlay_dir: Path) -> list[Entry]:
    """Entries of the manifest; every file under overlay/vllm must be listed, and vice versa."""
    manifest = overlay_dir / MANIFEST
    files = sorted(p.relative_to(overlay_dir).as_posix() for p in (overlay_dir / "vllm").rglob("*")
                   if p.is_file() and "__pycache__" not in p.parts) if (overlay_dir / "vllm").is_dir() else []
    if not manifest.exists():
        if files:
            raise ToolError(f"{manifest}: missing, but overlay files exist: {', '.join(files[:5])}")
        return []
    try:
        raw = tomllib.loads(manifest.read_text()).get("file", [])
    except tomllib.TOMLDecodeError as e:
        raise ToolError(f"{manifest}: not valid TOML: {e}") from None
    entries, problems = [], []
    for i, item in enumerate(raw, start=1):
        path, kind = item.get("path"), item.get("kind")
        if not path or kind not in ("new", "replace"):
            problems.append(f"entry {i}: needs path and kind = \"new\" or \"replace\"")
        elif kind == "replace" and not item.get("upstream_blob"):
            problems.append(f"{path}: kind = \"replace\" needs upstream_blob (the upstream blob it was forked from)")
        elif path not in files:
            problems.append(f"{path}: listed, but overlay/{path} does not exist")
        else:
            entries.append(Entry(path, kind, item.get("upstream_blob")))
    listed = {e.path for e in entries} | {item.get("path") for item in raw}
    problems += [f"overlay/{f}: not listed in the manifest" for f in files if f not in listed]
    if problems:
        raise ToolError(f"{manifest}:\n  " + "\n  ".join(problems))
    return entries


def check(entries: list[Entry], overlay_dir: Path, repo: Path, base: str) -> list[dict]:
    """Each entry against the upstream base: applied (ok to copy), conflict, target-missing, already-upstream."""
    results = []
    for e in entries:
        exists = hunks.file_exists(repo, base, e.path)
        blob = git.out(repo, "rev-parse", f"{base}:{e.path}") if exists else None
        ours = git.out(repo, "hash-object", str(overlay_dir / e.path))
        if e.kind == "new":
            if not exists:
                status, detail = "applied", "new file"
            elif blob == ours:
                status, detail = "already-upstream", "upstream now has this exact file: drop it from the overlay"
            else:
                status, detail = "conflict", f"upstream now has its own {e.path} (blob {blob[:12]})"
        elif not exists:
            status, detail = "target-missing", f"upstream no longer has {e.path} (moved or removed)"
        elif blob != e.upstream_blob:
            status, detail = "conflict", (f"upstream's {e.path} changed since the fork "
                                          f"({e.upstream_blob[:12]} -> {blob[:12]}): merge upstream's change, "
                                          "then update upstream_blob")
        else:
            status, detail = "applied", f"replaces upstream blob {blob[:12]}"
        results.append({"path": e.path, "kind": e.kind, "status": status, "detail": detail})
    return results


def copy(entries: list[Entry], overlay_dir: Path, repo: Path) -> None:
    for e in entries:
        dest = repo / e.path
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(overlay_dir / e.path, dest)
