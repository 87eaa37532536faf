"""Whole files copied over the patched tree, each with a manifest entry.

``overlay/manifest.toml`` lists every file under ``overlay/`` by its path in the tree
(``overlay/vllm/x.py`` lands at ``vllm/x.py``): ``kind = "new"`` for a file upstream does not
have, ``kind = "replace"`` with ``upstream_blob`` for a fork of an upstream file. A replaced
file whose upstream blob changed, or a new file upstream now also has, is a conflict: copying
it would silently revert upstream's fixes.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from . import git, hunks, schema
from .errors import ToolError

MANIFEST = "manifest.toml"


@dataclass
class Entry:
    path: str  # path in the tree, e.g. vllm/v1/x.py
    kind: str  # new | replace
    upstream_blob: str | None = None


ENTRY_KEYS = ("path", "kind", "upstream_blob")


def read_manifest(overlay_dir: Path) -> list[Entry]:
    """Entries of the manifest; every file under overlay/vllm must be listed, and vice versa.

    Overlay files are read only when they are regular files inside overlay/: a symlink (whose
    target could be anywhere) or a FIFO is refused, never copied into the tree.
    """
    manifest = overlay_dir / MANIFEST
    vllm_dir = overlay_dir / "vllm"
    if vllm_dir.is_symlink() or (vllm_dir.exists() and not schema.inside(vllm_dir, overlay_dir)):
        raise ToolError(f"{vllm_dir}: is a symlink; overlay/ holds the files themselves")
    files, odd = [], []
    for p in sorted(vllm_dir.rglob("*")) if vllm_dir.is_dir() else []:
        if "__pycache__" in p.parts:
            continue
        rel = p.relative_to(overlay_dir).as_posix()
        if p.is_symlink():
            odd.append(f"{p}: is a symlink (to {os.readlink(p)}); overlay/ holds the files themselves")
        elif kind := schema.special(p):
            odd.append(f"{p}: is {kind}, not a file")
        elif p.is_file():
            files.append(rel)
    if odd:
        raise ToolError("\n  ".join(odd))
    if not manifest.exists() and not manifest.is_symlink():
        if files:
            raise ToolError(f"{manifest}: missing, but overlay files exist: {', '.join(files[:5])}")
        return []
    data = schema.load_toml(manifest, overlay_dir, "the overlay manifest, TOML")
    raw = data.get("file", [])
    if not isinstance(raw, list) or not all(isinstance(item, dict) for item in raw):
        raise ToolError(f"{manifest}: `file` must be an array of tables ([[file]] entries with path and kind)")
    extra = sorted(set(data) - {"file"})
    if extra:
        raise ToolError(f"{manifest}: unknown top-level key {extra[0]!r} (expected only [[file]] entries)")
    entries, problems = [], []
    for i, item in enumerate(raw, start=1):
        where = f"{manifest}: [[file]] entry {i}"
        schema.unknown_keys(item, ENTRY_KEYS, where)
        path = schema.string(item, "path", where, expected="the file's path in the tree, like vllm/x.py")
        where = f"{manifest}: [[file]] {path}"
        if why := schema.safe_relpath(path):
            raise ToolError(f"{where}: path {why}; expected a path inside the tree like vllm/x.py")
        kind = schema.string(item, "kind", where, re.compile("new|replace"), '"new" or "replace"')
        blob = None
        if kind == "replace":
            blob = schema.string(item, "upstream_blob", where, schema.GIT_SHA_RE,
                                 "the upstream blob it was forked from (40 hex digits)")
        elif "upstream_blob" in item:
            problems.append(f"{path}: upstream_blob is only for kind = \"replace\"")
        if path not in files:
            problems.append(f"{path}: listed, but overlay/{path} does not exist")
        else:
            entries.append(Entry(path, kind, blob))
    listed = {item.get("path") for item in raw}
    problems += [f"overlay/{f}: not listed in the manifest" for f in files if f not in listed]
    if problems:
        raise ToolError(f"{manifest}: " + "\n  ".join(problems))
    return entries


def check(entries: list[Entry], overlay_dir: Path, repo: Path, base: str) -> list[dict]:
    """Each entry against the upstream base: applied (ok to copy), conflict, target-missing, already-upstream."""
    results = []
    links = _symlinks_on_the_way(repo, base, entries)
    for e in entries:
        if e.path in links:
            results.append({"path": e.path, "kind": e.kind, "status": "conflict", "detail": (
                f"the base has a symlink at {links[e.path]}: the file would be written through it, "
                "possibly outside the tree; refusing")})
            continue
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


def _symlinks_on_the_way(repo: Path, base: str, entries: list[Entry]) -> dict[str, str]:
    """Entries whose path in ``base`` passes through (or is) a symlink: {entry path: symlink path}."""
    prefixes = {"/".join(e.path.split("/")[:i]) for e in entries for i in range(1, e.path.count("/") + 2)}
    if not prefixes:
        return {}
    listing = git.out(repo, "ls-tree", "-z", base, "--", *sorted(prefixes)).split("\0")
    links = {line.split("\t", 1)[1] for line in listing if line.startswith("120000 ")}
    found = {}
    for e in entries:
        parts = e.path.split("/")
        hit = next(("/".join(parts[:i]) for i in range(1, len(parts) + 1) if "/".join(parts[:i]) in links), None)
        if hit:
            found[e.path] = hit
    return found


def copy(entries: list[Entry], overlay_dir: Path, repo: Path) -> None:
    """Copy the files into ``repo``; refuse a destination reached through a symlink the base holds."""
    for e in entries:
        dest = repo / e.path
        _check_destination(repo, e.path)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(overlay_dir / e.path, dest)


def _check_destination(repo: Path, rel: str) -> None:
    # a base may hold symlinks (vllm/v1 -> /elsewhere): writing through one would land outside the tree
    cur = repo
    for part in rel.split("/"):
        cur = cur / part
        if cur.is_symlink():
            raise ToolError(f"overlay/{rel}: the base has a symlink at {cur.relative_to(repo)} "
                            f"(to {os.readlink(cur)}); refusing to write the overlay file through it")
