"""One JSON report per run, and the short table a person reads.

Shape (stable): ``base`` {spec, commit, sha256, ...}, ``patches`` in series order, each with at
least file, status and commit (null when not applied), ``overlay`` entries, ``result``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

PATCH_STATUSES = ("applied", "applied-3way", "conflict", "error", "already-upstream", "partly-upstream",
                  "target-missing", "not-applied")


def write(report: dict, path: Path) -> None:
    """Write the report whole: a reader (or a run killed meanwhile) never sees half of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(report, indent=2) + "\n")
    os.replace(tmp, path)


def table(report: dict, out=None) -> None:
    out = out or sys.stdout
    base = report["base"]
    print(f"base     {base.get('spec')}  commit {base.get('commit', '')[:12]}"
          + (f"  sha256 {base['sha256'][:16]}…" if base.get("sha256") else "")
          + (f"  ({base['version']})" if base.get("version") else ""), file=out)
    width = max([len(p["file"]) for p in report["patches"]] + [10])
    for p in report["patches"]:
        commit = (p.get("commit") or "")[:12]
        print(f"  {p['status']:<16} {p['file']:<{width}} {commit}", file=out)
        for line in p.get("details", []):
            print(f"  {'':<16}   {line}", file=out)
        if p.get("decision"):
            print(f"  {'':<16}   -> {p['decision']}", file=out)
    for o in report.get("overlay", []):
        print(f"  {o['status']:<16} overlay/{o['path']:<{max(width - 8, 1)}} {o['detail']}", file=out)
    print(f"result   {report['result']}", file=out)
