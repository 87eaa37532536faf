"""The consolidation ledger: what used to be ours and upstream absorbed (patches/UPSTREAMED.toml)."""

from __future__ import annotations

from pathlib import Path

from . import schema
from .errors import ToolError

LEDGER = "UPSTREAMED.toml"
KEYS = ("item", "upstream", "first_release", "evidence")


def read(patches_dir: Path) -> list[dict]:
    path = patches_dir / LEDGER
    if not path.exists():
        return []
    items = schema.load_toml(path, patches_dir, "the ledger of upstreamed items, TOML").get("upstreamed", [])
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise ToolError(f"{path}: `upstreamed` must be an array of tables ([[upstreamed]] entries)")
    return items


def problems(patches_dir: Path) -> list[str]:
    out = []
    for i, item in enumerate(read(patches_dir), start=1):
        missing = [k for k in KEYS if not item.get(k)]
        if missing:
            out.append(f"{patches_dir / LEDGER}: entry {i} ({item.get('item', '?')}): missing {', '.join(missing)}")
    return out


def _q(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def entry_for(result: dict, base) -> str:
    """The TOML entry to add when --status finds a patch already upstream."""
    pr = result.get("upstream_pr")
    upstream = pr if pr and pr != "none" else "FILL IN: the upstream PR or commit"
    release = base.version or base.ref or base.commit[:12]
    return "\n".join([
        "  [[upstreamed]]",
        f"  item = {_q(result.get('subject') or result['file'])}",
        f"  upstream = {_q(upstream)}",
        f"  first_release = {_q(release)}  # first base seen with it; correct to the first release",
        f"  evidence = {_q('patch ' + result['file'] + ' applies in reverse on ' + (base.spec or 'the base'))}",
        f"  was = {_q(result['file'])}",
    ])
