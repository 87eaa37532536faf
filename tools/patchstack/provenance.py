"""Which upstream change made a patch of ours unnecessary?

For a git base (nightly, a tag, a sha, or a path: repository) the bases repository can hold
upstream's history: the commit that introduced an already-upstream hunk is found with git's
pickaxe (``git log -S``) on the hunk's most distinctive added line (for a pure removal, its most
distinctive removed line), between the previous base and the new one, following renames.
vLLM's squash-merge subjects end in ``(#NNNNN)``: that is the PR. A shallow fetch has no
history, so it is deepened from the same remote first, in steps, until the previous base is
reached (or a bound, reported).

For a PyPI base there is no history: the release is named instead, after checking that the
older base (the one the series was written on) does not already have the change.
"""

from __future__ import annotations

import re

from . import git, hunks, presence

PR_RE = re.compile(r"\(#(\d+)\)\s*$")
DEEPEN_STEP, DEEPEN_MAX = 256, 4096


def pickaxe_line(hunk: hunks.Hunk) -> str | None:
    """The most distinctive line the hunk adds (else removes): the longest non-generic one."""
    for kind in ("+", "-"):
        cands = [ln[1:].strip() for ln in hunk.lines if ln[:1] == kind and presence.distinctive(ln[1:])]
        if cands:
            return max(cands, key=len)
    return None


def _reachable(repo, ancestor: str, commit: str) -> bool:
    return git.run(repo, "merge-base", "--is-ancestor", ancestor, commit, check=False).returncode == 0


def ensure_history(repo, base, previous: str | None) -> str:
    """Deepen a shallow git base until ``previous`` is an ancestor; says what history there is."""
    if base.kind != "git" or not base.source:
        return "history as fetched"
    if git.out(repo, "rev-parse", "--is-shallow-repository") != "true":
        return "full history"
    import git as gitpython  # GitPython, as for the first fetch

    depth = 0
    while depth < DEEPEN_MAX:
        if previous and git.has_commit(repo, previous) and _reachable(repo, previous, base.commit):
            return f"deepened by {depth} commits to the previous base"
        depth += DEEPEN_STEP
        try:
            gitpython.Repo(repo).git.fetch(f"--deepen={DEEPEN_STEP}", "--no-tags", base.source,
                                           f"{base.commit}:refs/overlay-fetch/history",
                                           env={"GIT_TERMINAL_PROMPT": "0"})
        except gitpython.GitCommandError as e:
            return f"could not deepen the history from {base.source}: {(e.stderr or '').strip()[-200:]}"
        finally:
            git.run(repo, "update-ref", "-d", "refs/overlay-fetch/history", check=False)
    return f"deepened {DEEPEN_MAX} commits without reaching the previous base"


def renames(repo, base, previous: str | None) -> dict[str, str]:
    """old path -> new path for files upstream renamed between the previous base and this one
    (git's rename detection); empty without that history (PyPI bases, an unknown previous)."""
    if base.kind not in ("git", "path") or not previous or not git.has_commit(repo, previous):
        return {}
    out = git.run(repo, "diff", "-M", "--name-status", "-z", "--diff-filter=R", previous, base.commit,
                  check=False).stdout.split("\0")
    moved = {}
    for i in range(0, len(out) - 2, 3):
        if out[i].startswith("R"):
            moved[out[i + 1]] = out[i + 2]
    return moved


def upstream_commit(repo, base, previous: str | None, path: str, hunk: hunks.Hunk) -> dict | None:
    """{commit, subject, pr} of the newest upstream commit that brought the hunk's change."""
    line = pickaxe_line(hunk)
    if line is None:
        return None
    previous = previous if previous and git.has_commit(repo, previous) else None
    rng = f"{previous}..{base.commit}" if previous else base.commit
    p = git.run(repo, "log", "--format=%H%x09%s", "-S", line, "--follow", rng, "--", path, check=False)
    rows = [r.split("\t", 1) for r in p.stdout.splitlines() if "\t" in r]
    if p.returncode or not rows:
        return None
    sha, subject = rows[0]
    m = PR_RE.search(subject)
    return {"commit": sha, "subject": subject, "pr": f"#{m.group(1)}" if m else None,
            "range": rng, "pickaxe": line}


def first_release(repo, base, older_commit: str | None, older_name: str | None, path: str,
                  hunk: hunks.Hunk) -> dict:
    """For a base without history: this release has the change; is it new since the older base?"""
    release = base.version or base.spec
    if not older_commit:
        return {"first_release": release, "checked": "no older base to compare"}
    if presence.hunk_presence(hunks.file_lines(repo, older_commit, path), hunk) or hunks.check(
            repo, older_commit, hunks.mini_patch(hunks.FileDiff(path, path, [
                f"diff --git a/{path} b/{path}", f"--- a/{path}", f"+++ b/{path}"]), hunk), reverse=True):
        return {"first_release": f"<= {older_name}", "checked": f"already in {older_name}"}
    return {"first_release": release, "checked": f"not in {older_name}, in {release}"}
