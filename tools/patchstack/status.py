"""Classify every patch against a base without touching the build tree.

The series is replayed in a scratch index of the cached bases repository (no work tree, no
checkout of 9,000 files). Per patch, in this order:

- ``applied``: applies exactly;
- ``already-upstream``: the whole patch applies in reverse (StGit's ``rebase --merged`` test),
  or every hunk is there (reverse-applies, or its change is found by content through context
  drift: presence.py), or a 3-way merge of it changes nothing;
- ``partly-upstream``: some hunks are there, the rest apply (exactly, or with a 3-way merge), or
  a 3-way merge leaves some hunks out because upstream has them;
- ``target-missing``: a file it changes is gone upstream and nothing else fails;
- ``applied-3way``: applies only with a 3-way merge;
- ``conflict``: with the files, the hunks and the upstream lines that no longer match.

Every upstream verdict says how it was reached (``how``: exact reverse, content match, 3-way
no-op). Later patches are tried on the tree as far as it got (upstream's content, plus the hunks of a
partly-upstream patch that were still missing). Each result is joined with the patch metadata
and turned into a decision: keep, drop (with the ledger entry to add), or refresh.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from . import git, hunks, ledger, overlay, presence, provenance
from .apply import Project, _result, load_series, three_way_verdict
from .series import Patch, status_word
from .sources import Base, bases_repo


class ScratchTree:
    """A commit plus a private index in the bases repository; patches move it forward."""

    def __init__(self, repo: Path, commit: str):
        self.repo, self.commit = repo, commit
        fd, self.index = tempfile.mkstemp(prefix="overlay-status-index-")
        os.close(fd)
        self.env = dict(git.tool_env(date="2000-01-01T00:00:00Z"), GIT_INDEX_FILE=self.index)

    def close(self):
        os.unlink(self.index)

    def check(self, text: str, reverse: bool = False) -> bool:
        return hunks.check(self.repo, self.commit, text, reverse=reverse)

    def apply(self, text: str, message: str, three_way: bool = False) -> bool:
        git.run(self.repo, "read-tree", self.commit, env=self.env)
        args = ["apply", "--cached"] + (["--3way"] if three_way else [])
        if git.run(self.repo, *args, "-", input=text, env=self.env, check=False).returncode != 0:
            return False
        tree = git.out(self.repo, "write-tree", env=self.env)
        self.commit = git.out(self.repo, "commit-tree", tree, "-p", self.commit, "-m", message, env=self.env)
        return True


def classify(scratch: ScratchTree, patch: Patch, moved=None) -> dict:
    """``moved(path)``: where upstream renamed ``path`` to, when the base has the history."""
    text = patch.path.read_text(errors="replace")
    if scratch.apply(text, patch.subject):
        return _result(patch, "applied", commit=scratch.commit)
    if scratch.check(text, reverse=True):
        return _result(patch, "already-upstream", how="exact reverse",
                       details=["the whole patch applies in reverse on this base"])
    forward, present, failing, missing = [], [], [], []
    for f in hunks.parse(text):
        if f.old_path and not hunks.file_exists(scratch.repo, scratch.commit, f.old_path):
            new_path = moved(f.old_path) if moved else None
            if new_path is None:
                missing.append(f.old_path)
                continue
            # upstream renamed the file: look for the hunks by content at its new place
            lines = hunks.file_lines(scratch.repo, scratch.commit, new_path)
            found = [presence.hunk_presence(lines, h) for h in f.hunks]
            if all(found):
                present += [{"hunk": h.label(f.path), "how": f"{x.how} in {new_path} (renamed)"}
                            for h, x in zip(f.hunks, found, strict=True)]
            else:
                missing.append(f"{f.old_path} (renamed upstream to {new_path})")
            continue
        target_lines = None
        for h in f.hunks:
            mini = hunks.mini_patch(f, h)
            if scratch.check(mini):
                forward.append((f, h))
                continue
            if scratch.check(mini, reverse=True):
                present.append({"hunk": h.label(f.path), "how": "exact reverse"})
                continue
            if target_lines is None:
                target_lines = hunks.file_lines(scratch.repo, scratch.commit, f.path)
            found = presence.hunk_presence(target_lines, h)
            if found:
                present.append({"hunk": h.label(f.path), "how": found.how})
            else:
                failing.append({"file": f.path, "hunk": h.header, "f": f, "h": h, "why": found.how,
                                "mismatch": hunks.mismatch(scratch.repo, scratch.commit, f.path, h,
                                                           creates=f.old_path is None)})
    upstream_details = [f"already upstream ({p['how']}): {p['hunk']}" for p in present]
    if present and not missing:
        if not forward and not failing:
            return _result(patch, "already-upstream", how=_how(present), hunks_upstream=present,
                           details=[f"every hunk is already there ({len(present)})", *upstream_details])
        rest = [(x["f"], x["h"]) for x in failing] + forward
        if scratch.apply("".join(hunks.mini_patch(f, h) for f, h in rest), patch.subject + " (hunks upstream lacks)",
                         three_way=bool(failing)):
            ours = [h.label(f.path) for f, h in rest]
            return _result(patch, "partly-upstream", commit=scratch.commit, how=_how(present),
                           hunks_upstream=present, hunks_missing=ours, three_way=bool(failing),
                           details=upstream_details + [f"still ours: {x}" for x in ours])
    if missing and not failing:
        return _result(patch, "target-missing", missing_files=missing,
                       details=[hunks.missing_target(m) for m in missing])
    before = scratch.commit
    if scratch.apply(text, patch.subject, three_way=True):
        dropped = hunks.dropped_hunks(scratch.repo, before, scratch.commit, text)
        if dropped == "all":
            scratch.commit = before  # no empty commit: nothing of the patch is left to carry
        return three_way_verdict(patch, dropped, commit=scratch.commit if dropped != "all" else None)
    details = [hunks.missing_target(m) for m in missing]
    for h in failing:
        details += [f"{h['file']}: {h['hunk']}", f"    {h['mismatch']}"]
    return _result(patch, "conflict", files=sorted({h["file"] for h in failing} | set(missing)),
                   hunks=[{k: h[k] for k in ("file", "hunk", "mismatch", "why")} for h in failing],
                   missing_files=missing, hunks_upstream=present, details=details + upstream_details)


def _how(present: list[dict]) -> str:
    kinds = sorted({p["how"].split(" (")[0].split(" at line")[0] for p in present})
    return "per hunk: " + ", ".join(kinds)


UPSTREAM = ("already-upstream", "partly-upstream")


def name_upstream_change(repo: Path, base: Base, pin, patch: Patch, result: dict) -> list[dict]:
    """Per upstream hunk: the upstream commit and PR (git bases, through history), or the first
    release that has it (PyPI bases, checked against the pinned base the series was written on)."""
    labels = {h["hunk"] for h in result.get("hunks_upstream") or []}
    files = hunks.parse(patch.path.read_text(errors="replace"))
    wanted = [(f, h) for f in files for h in f.hunks if not labels or h.label(f.path) in labels]
    found = []
    if base.kind in ("git", "path"):
        history = provenance.ensure_history(repo, base, pin.commit)
        for f, h in wanted:
            c = provenance.upstream_commit(repo, base, pin.commit, f.path, h)
            found.append({"hunk": h.label(f.path), "history": history,
                          **(c or {"commit": None, "note": "no upstream commit found by pickaxe"})})
        return found
    older = None
    if base.version and base.version != pin.vllm:
        from .sources import resolve
        older = resolve("", pin).commit
    for f, h in wanted:
        found.append({"hunk": h.label(f.path), **provenance.first_release(
            repo, base, older, f"pypi:{pin.vllm}", f.path, h)})
    return found


def decision(result: dict, base: Base) -> str:
    s = result["status"]
    upstream = status_word({"Upstream-Status": result.get("upstream_status") or ""})
    if s == "applied":
        return "keep"
    if s == "already-upstream":
        return f"drop: upstream has it; record it in patches/{ledger.LEDGER}:\n" + ledger.entry_for(result, base)
    if s == "partly-upstream":
        return ("refresh: drop the hunks upstream already has, keep the rest; note them in "
                f"patches/{ledger.LEDGER}:\n" + ledger.entry_for(result, base))
    if s == "applied-3way":
        return "refresh: apply with --3way in build/vllm, then --export"
    if s == "target-missing":
        return "refresh: find where upstream moved the code (git log --follow) and retarget the patch"
    hint = " (it was submitted upstream: check whether the PR changed shape)" if upstream == "Submitted" else ""
    return "refresh: rebase by hand in build/vllm (apply.py --3way, fix, --continue, --export)" + hint


def run(project: Project, base: Base, pin) -> dict:
    patches = load_series(project)
    repo = bases_repo()
    scratch = ScratchTree(repo, base.commit)
    try:
        results = []
        renames: dict[str, str] | None = None

        def moved(path: str) -> str | None:  # history is fetched only when a file is missing
            nonlocal renames
            if renames is None:
                provenance.ensure_history(repo, base, pin.commit)
                renames = provenance.renames(repo, base, pin.commit)
            return renames.get(path)

        for patch in patches:
            r = classify(scratch, patch, moved=moved)
            if r["status"] in UPSTREAM:
                r["upstream_change"] = name_upstream_change(repo, base, pin, patch, r)
            r["decision"] = decision(r, base)
            results.append(r)
        entries = overlay.read_manifest(project.overlay_dir)
        overlay_results = overlay.check(entries, project.overlay_dir, repo, base.commit)
    finally:
        scratch.close()
    clean = all(r["status"] == "applied" for r in results) and all(
        o["status"] == "applied" for o in overlay_results)
    return {"tool": "tools/apply.py", "mode": "status", "overlay_version": pin.overlay_version,
            "base": base.to_json(), "patches": results, "overlay": overlay_results,
            "summary": {s: sum(r["status"] == s for r in results) for s in sorted({r["status"] for r in results})},
            "result": "clean" if clean else "changes-needed"}
