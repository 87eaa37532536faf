"""Split a patch into files and hunks, and check hunks one by one against a tree.

Used to say which hunks of a failing patch no longer apply (and what upstream has there now),
and, for --status, which hunks upstream already contains (they apply in reverse).
"""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from . import git

_HUNK_RE = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(.*)$")


@dataclass
class Hunk:
    header: str
    lines: list[str]
    old_start: int

    @property
    def preimage(self) -> list[str]:
        return [ln[1:] for ln in self.lines if ln[:1] in (" ", "-")]

    def label(self, path: str) -> str:
        return f"{path}:{self.old_start} {self.header.split('@@')[-1].strip()}".rstrip()


@dataclass
class FileDiff:
    old_path: str | None  # None for a new file
    new_path: str | None  # None for a deleted file
    header: list[str]
    hunks: list[Hunk] = field(default_factory=list)
    binary: bool = False

    @property
    def path(self) -> str:
        return self.old_path or self.new_path or "?"


def parse(diff_text: str) -> list[FileDiff]:
    """Files and hunks of a git diff; hunk bodies are delimited by the counts in their headers."""
    files: list[FileDiff] = []
    cur: FileDiff | None = None
    lines = diff_text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if line.startswith("diff --git "):
            m = re.match(r"diff --git a/(.*) b/(.*)$", line)
            cur = FileDiff(m.group(1) if m else None, m.group(2) if m else None, [line])
            files.append(cur)
        elif cur is None:
            continue
        elif (m := _HUNK_RE.match(line)) is not None:
            old_left = int(m.group(2)) if m.group(2) is not None else 1
            new_left = int(m.group(4)) if m.group(4) is not None else 1
            hunk = Hunk(line, [], int(m.group(1)))
            while i < len(lines) and (old_left > 0 or new_left > 0 or lines[i].startswith("\\")):
                body = lines[i] or " "  # a blank context line whose space a mailer ate
                i += 1
                hunk.lines.append(body)
                if body[0] == " ":
                    old_left, new_left = old_left - 1, new_left - 1
                elif body[0] == "-":
                    old_left -= 1
                elif body[0] == "+":
                    new_left -= 1
            cur.hunks.append(hunk)
        elif line == "-- " or not cur.header or cur.hunks:
            cur = None  # signature, or trailing text after the last hunk
        else:
            cur.header.append(line)
            if line.startswith("new file mode"):
                cur.old_path = None
            elif line.startswith("deleted file mode"):
                cur.new_path = None
            elif line.startswith(("Binary files", "GIT binary patch")):
                cur.binary = True
    return files


def mini_patch(f: FileDiff, hunk: Hunk) -> str:
    return "\n".join(f.header + [hunk.header] + hunk.lines) + "\n"


def check(repo: Path, treeish: str, patch_text: str, reverse: bool = False) -> bool:
    """Does ``patch_text`` apply exactly (no fuzz) to ``treeish``? Uses a throwaway index only."""
    fd, idx = tempfile.mkstemp(prefix="overlay-index-")
    os.close(fd)
    try:
        env = dict(os.environ, GIT_INDEX_FILE=idx)
        git.run(repo, "read-tree", treeish, env=env)
        args = ["apply", "--cached", "--check"] + (["-R"] if reverse else [])
        return git.run(repo, *args, "-", input=patch_text, env=env, check=False).returncode == 0
    finally:
        os.unlink(idx)


def missing_target(path: str) -> str:
    """The detail line for a file a patch changes that the base lacks."""
    return f"{path}: the patch changes this file, but the base does not have it (moved or removed upstream?)"


def mismatch(repo: Path, treeish: str, path: str, hunk: Hunk, creates: bool = False) -> str:
    """First line where the hunk's expected upstream text differs from what the tree has now."""
    p = git.run(repo, "show", f"{treeish}:{path}", check=False)
    if p.returncode != 0:
        return f"{path} does not exist in the tree"
    have = p.stdout.splitlines()
    want = hunk.preimage
    start = max(hunk.old_start - 1, 0)
    if creates:
        return "the patch creates this file, but the base already has it" + (
            f" (line 1: {have[0].strip()!r})" if have else " (empty)")
    if not want and have:
        return f"line 1: expected an empty file, found {have[0].strip()!r}"
    for i, line in enumerate(want):
        got = have[start + i] if start + i < len(have) else "<end of file>"
        if got != line:
            return f"line {start + i + 1}: expected {line.strip()!r}, found {got.strip()!r}"
    return "context matches at the recorded line, but an earlier hunk or the file header does not"


def file_lines(repo: Path, treeish: str, path: str) -> list[str]:
    p = git.run(repo, "show", f"{treeish}:{path}", check=False)
    return p.stdout.splitlines() if p.returncode == 0 else []


def file_exists(repo: Path, treeish: str, path: str) -> bool:
    return git.run(repo, "cat-file", "-e", f"{treeish}:{path}", check=False).returncode == 0


def dropped_hunks(repo: Path, before: str, after: str, patch_text: str) -> list[str] | str:
    """Hunks of ``patch_text`` whose change the commit range ``before..after`` (a 3-way apply of
    it) does not make, because upstream had them: their labels, or "all" when nothing changed."""
    if git.out(repo, "rev-parse", f"{before}^{{tree}}") == git.out(repo, "rev-parse", f"{after}^{{tree}}"):
        return "all"
    made = parse(git.run(repo, "diff", "--no-color", before, after).stdout)
    changed = {f.path: {ln for h in f.hunks for ln in h.lines if ln[:1] in "+-" and ln[1:].strip()}
               for f in made}
    dropped = []
    for f in parse(patch_text):
        for h in f.hunks:
            own = {ln for ln in h.lines if ln[:1] in "+-" and ln[1:].strip()}
            if own and not own & changed.get(f.path, set()):
                dropped.append(h.label(f.path))
    return dropped
