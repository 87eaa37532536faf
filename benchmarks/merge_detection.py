#!/usr/bin/env python3
"""How well does `tools/apply.py --status` recognise changes upstream has already merged?

Real upstream history, real classifier. For a release pair (OLD -> NEW) and a later TARGET:

1. every hunk upstream made between OLD and NEW in vLLM's Python files (`git diff -U3`, files
   present under the same path in all three releases) becomes a one-hunk patch on OLD, i.e. a
   change "of ours" that upstream then merged in NEW;
2. ground truth, independent of the classifier: the hunk is *still in effect* in TARGET when
   `git diff -U0 NEW TARGET` leaves its added lines alone (for a pure removal: its two neighbour
   lines, with nothing inserted between them); it *drifted* when that diff changes any other line
   of the hunk's span (its context) - the case exact reverse-apply cannot see;
3. each patch is classified against TARGET by `status.classify`, the function `--status` runs:
   recall = in-effect hunks called `already-upstream`, overall and on the drifted subset;
4. false positives: each in-effect hunk with a distinctive added line is changed in that one line
   (an identifier renamed, as a patch of ours that differs from upstream's change would); any of
   those called `already-upstream` is a false positive. Hunks that upstream changed again
   (not in effect) and are still called `already-upstream` are counted beside them
   (`changed_again_called_upstream`): upstream took the change and then moved on, so that verdict
   is defensible, but it is listed for review.

    python benchmarks/merge_detection.py [--out benchmarks/merge_detection.json] [--limit N]

Needs the three sdists (downloaded once into the cache, ~50 MB each). Not a test: it writes
figures; the tests for each rule are in tests/tool/test_merge_detection.py.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

from patchstack import git, hunks, sources, status  # noqa: E402
from patchstack.pin import read_pin  # noqa: E402
from patchstack.presence import distinctive  # noqa: E402
from patchstack.series import Patch  # noqa: E402

PAIRS = [("0.32.0", "0.33.0", "0.34.0"), ("0.33.0", "0.34.0", "0.34.0")]


def changed_lines(repo: Path, a: str, b: str, path: str) -> tuple[set[int], set[int]]:
    """Lines of ``path`` in ``a`` that ``git diff -U0 a b`` removes or changes, and the ``a`` line
    numbers after which it inserts lines."""
    out = git.out(repo, "diff", "-U0", "--no-color", a, b, "--", path)
    touched, inserted_after = set(), set()
    for m in re.finditer(r"^@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@", out, re.M):
        start, count = int(m.group(1)), int(m.group(2)) if m.group(2) is not None else 1
        if count == 0:
            inserted_after.add(start)
        touched.update(range(start, start + count))
    return touched, inserted_after


def new_side_lines(hunk: hunks.Hunk) -> list[tuple[str, int | None]]:
    """(kind, line number on the new side or None for removed lines) for each hunk line."""
    m = re.match(r"^@@ -\d+(?:,\d+)? \+(\d+)", hunk.header)
    n = int(m.group(1))
    out = []
    for ln in hunk.lines:
        k = ln[:1]
        if k in (" ", "+"):
            out.append((k, n))
            n += 1
        elif k == "-":
            out.append((k, None))
    return out


def ground_truth(hunk: hunks.Hunk, touched: set[int], inserted_after: set[int]) -> tuple[bool, bool]:
    """(still in effect in TARGET, context drifted) from NEW -> TARGET's -U0 diff."""
    lines = new_side_lines(hunk)
    added = [n for k, n in lines if k == "+"]
    span = [n for _, n in lines if n is not None]
    if added:
        in_effect = not (set(added) & touched) and not any(a in inserted_after for a in added[:-1])
    else:  # pure removal: the neighbours stay, nothing comes between them
        idx = [i for i, (k, _) in enumerate(lines) if k == "-"]
        before = next((n for k, n in reversed(lines[:idx[0]]) if k == " "), None)
        after = next((n for k, n in lines[idx[-1] + 1:] if k == " "), None)
        # a neighbour of None is the file's edge, which nothing can change
        in_effect = not ({before, after} & touched) and before not in inserted_after
    drifted = in_effect and bool((set(span) & touched) or (set(span[:-1]) & inserted_after))
    return in_effect, drifted


def mutate(hunk: hunks.Hunk) -> hunks.Hunk | None:
    """The same hunk with one distinctive added line changed (its first identifier renamed)."""
    for i, ln in enumerate(hunk.lines):
        if ln.startswith("+") and distinctive(ln[1:]):
            new = re.sub(r"[A-Za-z_][A-Za-z0-9_]{2,}", lambda m: m.group(0) + "_ours", ln[1:], count=1)
            if new != ln[1:]:
                lines = list(hunk.lines)
                lines[i] = "+" + new
                return hunks.Hunk(hunk.header, lines, hunk.old_start)
    return None


def classify(repo: Path, target: str, f: hunks.FileDiff, hunk: hunks.Hunk, scratch_dir: Path) -> dict:
    text = hunks.mini_patch(f, hunk)
    path = scratch_dir / "hunk.patch"
    path.write_text(text)
    scratch = status.ScratchTree(repo, target)
    try:
        return status.classify(scratch, Patch(name="bench/hunk.patch", group=None, path=path, subject="hunk"))
    finally:
        scratch.close()


def run_pair(repo: Path, commits: dict[str, str], old: str, new: str, target: str, limit: int,
             rng: random.Random, scratch_dir: Path) -> dict:
    o, n, t = commits[old], commits[new], commits[target]
    files = [p for p in git.out(repo, "diff", "--name-only", "--diff-filter=M", o, n, "--", "vllm").splitlines()
             if p.endswith(".py") and hunks.file_exists(repo, t, p)]
    population = []
    for path in files:
        touched, inserted = changed_lines(repo, n, t, path) if n != t else (set(), set())
        for f in hunks.parse(git.run(repo, "diff", "-U3", "--no-color", o, n, "--", path).stdout):
            for h in f.hunks:
                population.append((f, h, *ground_truth(h, touched, inserted)))
    # overall figures on a seeded random sample; the drifted subset in full (it is small and it
    # is the case this benchmark is about)
    sample = population if len(population) <= limit else rng.sample(population, limit)
    in_sample = {id(x) for x in sample}
    sample += [x for x in population if x[3] and id(x) not in in_sample]
    counts: Counter = Counter()
    how: Counter = Counter()
    misses, false_pos = [], []
    t0 = time.perf_counter()
    for x in sample:
        f, h, in_effect, drifted = x
        r = classify(repo, t, f, h, scratch_dir)
        called = r["status"] == "already-upstream"
        if drifted:
            counts["drifted"] += 1
            counts["drifted_called_upstream"] += called
        if id(x) in in_sample:  # the random sample: the overall figures
            counts["in_effect" if in_effect else "not_in_effect"] += 1
            counts["in_effect_called_upstream"] += in_effect and called
        if in_effect:
            if called:
                how[r.get("how") or "?"] += 1
            elif len(misses) < 25:
                misses.append({"hunk": h.label(f.path), "status": r["status"], "drifted": drifted,
                               "details": r.get("details", [])[:3]})
            m = mutate(h)
            if m is not None:
                counts["mutated"] += 1
                rm = classify(repo, t, f, m, scratch_dir)
                if rm["status"] == "already-upstream":
                    counts["mutated_called_upstream"] += 1
                    false_pos.append({"hunk": h.label(f.path), "kind": "one added line changed",
                                      "details": rm.get("details", [])[:3]})
        elif called:
            counts["not_in_effect_called_upstream"] += 1
            false_pos.append({"hunk": h.label(f.path), "kind": "upstream changed it again",
                              "details": r.get("details", [])[:3]})
    elapsed = time.perf_counter() - t0

    def ratio(a: str, b: str) -> float | None:
        return round(counts[a] / counts[b], 4) if counts[b] else None

    return {"old": old, "new": new, "target": target, "files": len(files), "hunks_total": len(population),
            "hunks_sampled": len(in_sample), "hunks_drifted_total": counts["drifted"],
            "hunks_classified": len(sample), "counts": dict(counts),
            "recall": ratio("in_effect_called_upstream", "in_effect"),
            "recall_drifted": ratio("drifted_called_upstream", "drifted"),
            "false_positives": counts["mutated_called_upstream"],
            "changed_again_called_upstream": counts["not_in_effect_called_upstream"],
            "decided_by": dict(how), "misses_sample": misses, "false_positive_list": false_pos[:25],
            "seconds": round(elapsed, 1)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "merge_detection.json")
    p.add_argument("--limit", type=int, default=400, help="hunks sampled per release pair (seeded)")
    p.add_argument("--seed", type=int, default=12)
    args = p.parse_args(argv)
    pin = read_pin(ROOT / "VERSION")
    commits = {v: sources.resolve(f"pypi:{v}", pin).commit for v in sorted({v for t in PAIRS for v in t})}
    repo = sources.bases_repo()
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        pairs = [run_pair(repo, commits, *t, args.limit, rng, Path(tmp)) for t in PAIRS]
    result = {"what": "already-upstream recall and false positives of status.classify on real vLLM history",
              "date": time.strftime("%Y-%m-%d"), "goal": {"recall": 0.95, "recall_drifted": 0.90,
                                                          "false_positives": 0},
              "seed": args.seed, "limit": args.limit, "pairs": pairs}
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    for r in pairs:
        print(f"{r['old']} -> {r['new']} vs {r['target']}: {r['hunks_sampled']}/{r['hunks_total']} hunks, "
              f"recall {r['recall']}, drifted {r['recall_drifted']} ({r['counts'].get('drifted', 0)}), "
              f"false positives {r['false_positives']} ({r['seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
