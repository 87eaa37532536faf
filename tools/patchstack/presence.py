"""Is a hunk's change already in a file, whatever happened to the lines around it?

Exact reverse-apply (git apply -R) stays the fast path; it needs every context line unchanged.
Upstream rarely merges a change that way: a blank line goes, a neighbouring line is reworded,
the hunk moves. This module decides presence by content, with this rule:

1. Lines are compared after normalising whitespace that cannot change meaning: trailing
   whitespace is ignored and runs of inner whitespace count as one space. Leading indentation
   is kept exactly (it is syntax in Python), and blank lines are skipped on both sides.
2. A hunk holds one or more *changes* (runs of removed and added lines between context lines);
   each must be in effect, in order. A change that adds lines is found where its added lines
   stand as one contiguous run (any line offset). A change that only removes lines is found
   where the nearest context lines that still exist on its two sides stand together (at most
   MARGIN unknown lines between them).
3. The lines a change removes must be gone from where it is found (its neighbourhood, as far as
   the hunk's context reaches plus MARGIN lines): a removed line still standing there means the
   change is not in effect.
4. Enough distinctive content: a generic change (a lone ``return``, brackets, ``else:``) could be
   anywhere, so the evidence is each change's result plus the context lines that still match
   right next to it; each line weighs 0 (generic), 1 (a name or two) or 2 (several names, 16+
   characters of them), and the sum must reach MIN_EVIDENCE. The first change must occur only
   once in the file unless its surrounding context picks one occurrence.

What it does not do: follow a change that upstream rewrote (another wording is another change
and stays ours), or search other files (a moved file is found by the caller through git's rename
detection).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .hunks import Hunk

# a line is generic when, stripped of punctuation and these words, nothing is left
_GENERIC_WORDS = {"return", "pass", "else", "try", "finally", "break", "continue", "none", "true", "false",
                  "self", "end", "fi", "done", "then", "do", "endif"}
MIN_EVIDENCE = 2  # weight of core + adjacent matching context (see weight())
STRONG_CHARS = 16
MARGIN = 3  # lines beyond the hunk's context where a removed run still counts as "still there"


def norm(line: str) -> str:
    stripped = line.rstrip()
    body = stripped.lstrip()
    return stripped[: len(stripped) - len(body)] + " ".join(body.split())


def _words(line: str) -> list[str]:
    body = line.strip()
    if not body or body.startswith("#"):
        return []
    return [w for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]*|\d+", body) if w.lower() not in _GENERIC_WORDS]


def distinctive(line: str) -> bool:
    return sum(len(w) for w in _words(line)) >= 3


def weight(line: str) -> int:
    """Evidence a line gives: 0 generic, 1 distinctive, 2 for a line with several names and
    STRONG_CHARS characters of them (a call with arguments, an assignment from one)."""
    words = _words(line)
    size = sum(len(w) for w in words)
    return 0 if size < 3 else 2 if len(words) >= 2 and size >= STRONG_CHARS else 1


@dataclass
class Presence:
    present: bool
    how: str  # one line for the report

    def __bool__(self) -> bool:
        return self.present


def _find_all(haystack: list[str], needle: list[str]) -> list[int]:
    if not needle:
        return []
    first, n = needle[0], len(needle)
    return [i for i in range(len(haystack) - n + 1) if haystack[i] == first and haystack[i:i + n] == needle]


@dataclass
class _Change:
    """One change of a hunk: a run of removed and added lines, with the context lines around it
    (up to the neighbouring change or the hunk's edge). Blank lines dropped, text normalised."""

    before: list[str]
    removed: list[str]
    added: list[str]
    after: list[str]


def _changes(hunk: Hunk) -> list[_Change]:
    body = [(ln[:1], norm(ln[1:])) for ln in hunk.lines if ln[:1] in (" ", "-", "+")]
    body = [(k, t) for k, t in body if t.strip()]
    runs: list[tuple[int, int]] = []  # [start, end) of each run of changed lines
    i = 0
    while i < len(body):
        if body[i][0] == " ":
            i += 1
            continue
        j = i
        while j < len(body) and body[j][0] != " ":
            j += 1
        runs.append((i, j))
        i = j
    out = []
    for n, (s, e) in enumerate(runs):
        lo = runs[n - 1][1] if n else 0
        hi = runs[n + 1][0] if n + 1 < len(runs) else len(body)
        out.append(_Change(before=[t for _, t in body[lo:s]], removed=[t for k, t in body[s:e] if k == "-"],
                           added=[t for k, t in body[s:e] if k == "+"], after=[t for _, t in body[e:hi]]))
    return out


@dataclass
class _Found:
    start: int  # first line of the change's result (or of the anchor pair), in non-blank lines
    end: int
    context: int  # context lines that still match right next to it
    evidence: int


def _context_run(lines: list[str], start: int, end: int, before: list[str], after: list[str]) -> tuple[int, int]:
    nb = 0
    while nb < len(before) and start - 1 - nb >= 0 and lines[start - 1 - nb] == before[-1 - nb]:
        nb += 1
    na = 0
    while na < len(after) and end + na < len(lines) and lines[end + na] == after[na]:
        na += 1
    return nb, na


def _find_change(lines: list[str], c: _Change, not_before: int) -> tuple[list[_Found], str]:
    """Where ``c`` is in effect at or after line ``not_before``, with the reason when nowhere."""
    found = []
    if c.added:
        starts = [s for s in _find_all(lines, c.added) if s >= not_before]
        if not starts:
            return [], "its resulting lines are not in the file"
        for s in starts:
            e = s + len(c.added)
            nb, na = _context_run(lines, s, e, c.before, c.after)
            lo, hi = max(s - len(c.before) - MARGIN, 0), min(e + len(c.after) + MARGIN, len(lines))
            if any(r not in c.added and r in lines[lo:hi] for r in c.removed if distinctive(r)):
                continue  # a line it removes still stands next to it: not in effect here
            found.append(_Found(s, e, nb + na, sum(weight(t) for t in lines[s - nb:e + na])))
        return found, "its lines are there, but so is a line it removes" if not found else ""
    # a removal: the nearest context lines that still exist on both sides stand together, and
    # what it removes is not between them
    for i, b in enumerate(reversed(c.before)):
        for p in (x for x, line in enumerate(lines) if line == b and x >= not_before):
            for j, a in enumerate(c.after):
                q = next((y for y in range(p + 1, min(p + 2 + i + j + MARGIN, len(lines))) if lines[y] == a), None)
                if q is None:
                    continue
                if any(r in lines[p + 1:q] for r in c.removed if distinctive(r)):
                    continue
                nb, _ = _context_run(lines, p + 1, p + 1, c.before[:len(c.before) - i], [])
                _, na = _context_run(lines, q, q, [], c.after[j:])
                found.append(_Found(p - nb + 1, q, nb + na, sum(weight(t) for t in lines[p + 1 - nb:p + 1])
                                    + sum(weight(t) for t in lines[q:q + na])))
                break
    return found, "" if found else "no place where the lines around its removal stand together"


def hunk_presence(file_lines: list[str], hunk: Hunk) -> Presence:
    """Is ``hunk``'s change in effect in a file of ``file_lines``? (See the module docstring.)"""
    changes = _changes(hunk)
    if not changes:
        return Presence(False, "the hunk changes only blank lines: nothing to look for")
    text = [norm(ln) for ln in file_lines]
    keep = [i for i, t in enumerate(text) if t.strip()]
    lines = [text[i] for i in keep]
    pos, evidence, drift, first = 0, 0, 0, None
    for n, c in enumerate(changes):
        found, why = _find_change(lines, c, pos)
        if not found:
            return Presence(False, why if len(changes) == 1 else f"change {n + 1} of {len(changes)}: {why}")
        best = max(found, key=lambda f: (f.context, f.evidence, -f.start))
        ties = [f for f in found if (f.context, f.evidence) == (best.context, best.evidence)]
        if len(ties) > 1 and n == 0:
            return Presence(False, f"its resulting lines occur {len(ties)} times and the context picks none")
        best = min(ties, key=lambda f: f.start)  # later changes: the first place after the previous one
        first = best.start if first is None else first
        pos, evidence = best.end, evidence + best.evidence
        drift += len(c.before) + len(c.after) - best.context
    if evidence < MIN_EVIDENCE:
        return Presence(False, f"too generic to match by content (evidence {evidence} < {MIN_EVIDENCE})")
    how = f"content match at line {keep[first] + 1}" + (f" ({drift} context line(s) drifted)" if drift else "")
    return Presence(True, how)
