"""``--check`` for CI: the stack is consistent with itself and with the pinned base.

1. the series and every patch's metadata lint clean, and so does the ledger;
2. the series applies exactly (no 3-way) to the pinned base, and the overlay fits it;
3. re-exporting the resulting tree reproduces patches/ byte for byte.
"""

from __future__ import annotations

import filecmp
import sys
import tempfile
from pathlib import Path

from . import apply, export, ledger, lock, overlay, sources
from .errors import ToolError
from .series import read_series


def run(project: apply.Project, pin, remote: str | None = None) -> int:
    failures: list[str] = []
    apply.check_layout(project)
    series = read_series(project.patches_dir)
    failures += series.problems + ledger.problems(project.patches_dir)
    try:
        overlay.read_manifest(project.overlay_dir)
    except ToolError as e:
        failures.append(str(e))
    if failures:
        return _fail(failures)
    with lock.hold(sources.cache_dir(), "the bases cache", wait=True):
        base = sources.resolve("", pin, remote)
    with tempfile.TemporaryDirectory(prefix="overlay-check-") as tmp:
        tree = Path(tmp) / "vllm"
        rep = apply.build(project, base, tree, Path(tmp) / "report.json",
                          three_way=False, force=False, overlay_version=pin.overlay_version)
        for r in rep["patches"] + rep["overlay"]:
            if r["status"] != "applied":
                failures.append(f"{r.get('file') or 'overlay/' + r['path']}: {r['status']}"
                                + "".join(f"\n      {d}" for d in r.get("details", [])))
        if not failures:
            out = Path(tmp) / "export"
            out.mkdir()
            export.export_tree(project, tree, dest=out)
            failures += _compare(project.patches_dir, out, [p.name for p in series.patches])
        print(f"check: {len(series.patches)} patches, {len(rep['overlay'])} overlay files on base "
              f"{base.spec} ({base.commit[:12]})")
    if failures:
        return _fail(failures)
    print("check: clean (lint, exact apply, byte-identical re-export, overlay manifest)")
    return 0


def _compare(patches_dir: Path, exported: Path, names: list[str]) -> list[str]:
    out = []
    for name in ["series"] + names:
        a, b = patches_dir / name, exported / name
        if not b.exists():
            out.append(f"patches/{name}: not reproduced by the export")
        elif not filecmp.cmp(a, b, shallow=False):
            out.append(f"patches/{name}: re-export differs (run `python tools/apply.py` then `--export`, "
                       "and commit the result)")
    return out


def _fail(failures: list[str]) -> int:
    print("check failed:\n  " + "\n  ".join(failures), file=sys.stderr)
    return 1

