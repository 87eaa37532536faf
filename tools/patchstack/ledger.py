"""The consolidation ledger: what used to be ours and upstream absorbed (patches/UPSTREAMED.toml)."""

from __future__ import annotations

from pathlib import Path

from . import schema
from .errors import ToolError

LEDGER = "UPSTREAMED.toml"
KEY = "upstreamed"  # the array of tables in the ledger
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


def entry_for(result: dict, base) -> str:
    """The TOML entry to add when a patch (or part of it) is found already upstream."""
    changes = result.get("upstream_change") or []
    commits = [c for c in changes if c.get("commit")]
    pr = result.get("upstream_pr")
    header_pr = pr if pr and pr != "none" else None
    if commits:  # the PR from the upstream subject, else the one the patch header names
        upstream = ", ".join(dict.fromkeys(
            c["commit"][:12] + (f" ({c.get('pr') or header_pr})" if c.get("pr") or header_pr else "")
            for c in commits))
    else:
        upstream = header_pr or "FILL IN: the upstream PR or commit"
    releases = [c["first_release"] for c in changes if c.get("first_release")]
    release = releases[0] if releases else (base.version or base.ref or base.commit[:12])
    checked = next((c.get("checked") for c in changes if c.get("checked")), None)
    how = result.get("how") or "patch applies in reverse"
    part = "" if result["status"] == "already-upstream" else f" (part: {len(result.get('hunks_upstream') or [])} hunks)"
    evidence = f"{how}: patch {result['file']} on {base.spec or base.commit[:12]}"
    import tomlkit  # writes the entry as it will stand in the ledger, comment included

    entry = tomlkit.table()
    entry.add("item", (result.get("subject") or result["file"]) + part)
    entry.add("upstream", upstream)
    entry.add("first_release", release)
    entry["first_release"].comment(checked or "the base it was seen on; not checked against older bases")
    entry.add("evidence", evidence)
    entry.add("was", result["file"])
    doc = tomlkit.document()
    doc.add(KEY, tomlkit.aot())
    doc[KEY].append(entry)
    return "\n".join("  " + line for line in tomlkit.dumps(doc).strip().splitlines())
