"""Classify every patch against a base without touching the build tree.

The series is replayed in a scratch index of the cached bases repository (no work tree, no
checkout of 9,000 files). Per patch, in this order:

- ``applied``: applies exactly;
- ``already-upstream``: the whole patch applies in reverse (StGit's ``rebase --merged`` test),
  or every hunk does;
- ``partly-upstream``: some hunks apply in reverse, the rest apply forward;
- ``target-missing``: a file it changes is gone upstream and nothing else fails;
- ``applied-3way``: applies only with a 3-way merge;
- ``conflict``: with the files, the hunks and the upstream lines that no longer match.

Later patches are tried on the tree as far as it got (upstream's content, plus the hunks of a
partly-upstream patch that were still missing). Each result is joined with the patch metadata
and turned into a decision: keep, drop (with the ledger entry to add), or refresh.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from . import git, hunks, ledger, overlay
from .apply import Project, _result, load_series
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


def classify(scratch: ScratchTree, patch: Patch) -> dict:
    text = patch.path.read_text(errors="replace")
    if scratch.apply(text, patch.subject):
        return _result(patch, "applied", commit=scratch.commit)
    if scratch.check(text, reverse=True):
        return _result(patch, "already-upstream", details=["the whole patch applies in reverse on this base"])
    forward, present, failing, missing = [], [], [], []
    for f in hunks.parse(text):
        if f.old_path and not hunks.file_exists(scratch.repo, scratch.commit, f.old_path):
            missing.append(f.old_path)
            continue
        for h in f.hunks:
            mini = hunks.mini_patch(f, h)
            if scratch.check(mini):
                forward.append((f, h))
            elif scratch.check(mini, reverse=True):
                present.append(h.label(f.path))
            else:
                failing.append({"file": f.path, "hunk": h.header,
                                "mismatch": hunks.mismatch(scratch.repo, scratch.commit, f.path, h,
                                                           creates=f.old_path is None)})
    if not failing and not missing and present:
        if not forward:
            return _result(patch, "already-upstream", details=[f"every hunk is already there ({len(present)})"])
        rest = "".join(hunks.mini_patch(f, h) for f, h in forward)
        scratch.apply(rest, patch.subject + " (hunks upstream lacks)")
        return _result(patch, "partly-upstream", commit=scratch.commit, hunks_upstream=present,
                       hunks_missing=[h.label(f.path) for f, h in forward],
                       details=[f"already upstream: {x}" for x in present]
                       + [f"still ours: {h.label(f.path)}" for f, h in forward])
    if missing and not failing:
        return _result(patch, "target-missing", missing_files=missing,
                       details=[hunks.missing_target(m) for m in missing])
    if scratch.apply(text, patch.subject, three_way=True):
        return _result(patch, "applied-3way", commit=scratch.commit)
    details = [hunks.missing_target(m) for m in missing]
    for h in failing:
        details += [f"{h['file']}: {h['hunk']}", f"    {h['mismatch']}"]
    return _result(patch, "conflict", files=sorted({h["file"] for h in failing} | set(missing)),
                   hunks=failing, missing_files=missing, hunks_upstream=present, details=details)


def decision(result: dict, base: Base) -> str:
    s = result["status"]
    upstream = status_word({"Upstream-Status": result.get("upstream_status") or ""})
    if s == "applied":
        return "keep"
    if s == "already-upstream":
        return f"drop: upstream has it; record it in patches/{ledger.LEDGER}:\n" + ledger.entry_for(result, base)
    if s == "partly-upstream":
        return "refresh: drop the hunks upstream already has, keep the rest"
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
        for patch in patches:
            r = classify(scratch, patch)
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
