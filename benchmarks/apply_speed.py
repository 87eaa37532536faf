#!/usr/bin/env python3
"""Warm full apply (tools/apply.py) against raw `git am` of the same mails on the same tree.

Both start from the same warm state: the sdist cached, the base fetched, the last result checked
out (the tool's tree, and a `--shared` clone of it for raw git am, so neither disturbs the other).
- raw:  git checkout -f -B patched base && git am <every patch in series order>   (the floor)
- tool --full: python tools/apply.py --full   (every patch replayed with git am, plus what the
        tool adds: resolve the pin, lint series and manifest, `git status` safety check, overlay
        commit, JSON report)
- tool: python tools/apply.py   (the warm default: the series is unchanged, so the tree's own
        reproducible commits are kept instead of re-made, which gives the same commit ids)
The overlay commit has no raw equivalent; it is part of the tool's cost. Reports the median of
N alternating runs of each and the ratio (goal: within 1.5x). Not a test: numbers go to stdout
and, with --json, to a file.

    python benchmarks/apply_speed.py [--runs 7] [--json benchmarks/results/apply_speed.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

from patchstack.apply import Project, load_series  # noqa: E402


def sh(*cmd, cwd=None):
    subprocess.run(cmd, cwd=cwd, check=True, capture_output=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--tree", type=Path, default=ROOT / "build" / "bench-vllm")
    args = ap.parse_args()
    tool = [sys.executable, str(ROOT / "tools" / "apply.py"), "--out", str(args.tree)]
    sh(*tool, "--force")  # warm: sdist cached and imported, base fetched into the tree
    raw_tree = args.tree.with_name(args.tree.name + "-raw")
    if not raw_tree.exists():  # a second checkout of the same repository for raw git am
        sh("git", "clone", "-q", "--shared", str(args.tree), str(raw_tree))
        sh("git", "fetch", "-q", "origin", "refs/tags/base:refs/tags/base", cwd=raw_tree)
    mails = [str(p.path) for p in load_series(Project(ROOT))]
    raw_times, tool_times, full_times = [], [], []
    for _ in range(args.runs):
        t = time.perf_counter()
        sh("git", "checkout", "-q", "-f", "-B", "patched", "base", cwd=raw_tree)
        if mails:
            sh("git", "am", "--keep", "--keep-cr", "--committer-date-is-author-date", "--quiet", *mails,
               cwd=raw_tree)
        raw_times.append(time.perf_counter() - t)
        t = time.perf_counter()
        sh(*tool, "--full")
        full_times.append(time.perf_counter() - t)
        t = time.perf_counter()
        sh(*tool)
        tool_times.append(time.perf_counter() - t)
    raw, full, warm = (statistics.median(x) for x in (raw_times, full_times, tool_times))
    result = {"patches": len(mails), "runs": args.runs, "raw_git_am_s": round(raw, 3),
              "tool_full_replay_s": round(full, 3), "ratio_full_replay": round(full / raw, 2),
              "tool_warm_apply_s": round(warm, 3), "ratio_warm_apply": round(warm / raw, 2), "goal_ratio": 1.5,
              "machine": f"{platform.machine()} {platform.python_version()} nproc={__import__('os').cpu_count()}"}
    print(json.dumps(result, indent=1))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
