#!/usr/bin/env python3
"""Check what `bash ci/build.sh` produced, as a new user would expect it (run by .ci/run).

    python ci/check_build.py [TREE]     # with the Python of the venv ci/build.sh installed into

- TREE (default build/vllm) is a git tree whose `base` tag is the base the report names, with
  one commit per patch of patches/series and the overlay commit above it, and nothing else;
- the report beside it (TREE-report.json) says the run was clean and every patch applied;
- `import vllm` in this interpreter is that tree, at the version ci/install.py installed
  (the overlay version of VERSION, with upstream's `.empty` mark on the Python-only route).
Exit 0 when all hold; otherwise one line per problem and exit 1.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import common
import install
from common import CIError


def problems(tree: Path) -> list[str]:
    from patchstack.series import read_series

    out: list[str] = []
    pin = common.load_pin()
    report = common.report_path(tree)
    try:
        rep = json.loads(report.read_text())
    except (OSError, ValueError) as e:
        return [f"{report}: no readable report ({e})"]
    if rep.get("result") != "clean":
        out.append(f"{report}: result {rep.get('result')!r}, expected 'clean'")
    patches = read_series(common.ROOT / "patches").patches
    statuses = {p["file"]: p["status"] for p in rep.get("patches", [])}
    for p in patches:
        if statuses.get(p.name) != "applied":
            out.append(f"{report}: {p.name} is {statuses.get(p.name)!r}, expected 'applied'")

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(tree), *args], capture_output=True, text=True).stdout.strip()

    base = git("rev-parse", "base^{commit}")
    if not base or base != rep.get("base", {}).get("commit"):
        out.append(f"{tree}: tag base is {base or 'missing'}, the report names {rep.get('base', {}).get('commit')}")
    subjects = git("log", "--format=%s", "--reverse", "base..HEAD").splitlines()
    if len(subjects) != len(patches) + 1 or not subjects[-1].startswith("overlay:"):
        out.append(f"{tree}: {len(subjects)} commits above base, expected {len(patches)} patches + the overlay")

    stamp = install.stamp_path()
    try:
        installed = json.loads(stamp.read_text())
    except (OSError, ValueError):
        return [*out, f"{stamp}: ci/install.py left no install record in this environment"]
    proc = install.imported_vllm()
    if proc.returncode:
        return [*out, f"import vllm failed: {proc.stderr.strip().splitlines()[-1:]}"]
    file, version = proc.stdout.strip().splitlines()[-2:]
    if not Path(file).resolve().is_relative_to(tree.resolve()):
        out.append(f"import vllm gives {file}, not the tree {tree}")
    if version != installed["version"] or not version.startswith(pin.overlay_version):
        out.append(f"vllm.__version__ is {version}, expected {installed['version']} (overlay {pin.overlay_version})")
    print(f"import vllm: {version} from {Path(file).parent} ({installed['route']} route)")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="ci/check_build.py", description=__doc__.split("\n\n")[0])
    p.add_argument("tree", nargs="?", type=Path, default=common.DEFAULT_TREE)
    tree = p.parse_args(argv).tree.absolute()
    try:
        found = problems(tree)
    except CIError as e:
        found = [str(e)]
    for line in found:
        print(f"error: {line}", file=sys.stderr)
    if not found:
        print(f"ok: {tree} is the pinned base + patches/series + overlay, installed and importable")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
