"""Is a hunk's change already in a file, whatever happened to the lines around it?

Exact reverse-apply (git apply -R) stays the fast path; it needs every context line unchanged.
Upstream rarely merges a change that way: a blank line goes, a neighbouring line is reworded,
the hunk moves. This module decides presence by content, with this rule:

1. Lines are compared after normalising whitespace that cannot change meaning: trailing
   whitespace is ignored and runs of inner whitespace count as one space. Leading indentation
   is kept exactly (it is syntax in Python), and blank lines are skipped on both sides.
2. The hunk's *core* is its result from the first to the last changed line: the added lines
   with the context lines between them. The core must appear in the file as one contiguous
   run (any line offset). For a hunk that only removes lines, the core is the pair of context
   lines that the removal makes adjacent.
3. The lines the hunk removes must be gone from where the core sits (the core's neighbourhood,
   as far as the hunk's context reaches plus a margin): a removed run still standing there
   means the change is not in effect.
4. Enough distinctive content: a generic core (a lone ``return``, brackets, ``else:``) could be
   anywhere, so the evidence is the core plus the context lines that still match right next to
   it; each line weighs 0 (generic), 1 (a name or two) or 2 (several names, 16+ characters of
   them), and the sum must reach MIN_EVIDENCE. The core must also occur only once in the file
   unless its surrounding context picks one occurrence.

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


def _split(hunk: Hunk) -> tuple[list[str], list[tuple[str, str]], list[str]]:
    """(context before, the changed region as (kind, text), context after); blank lines dropped."""
    body = [(ln[:1], norm(ln[1:])) for ln in hunk.lines if ln[:1] in (" ", "-", "+")]
    body = [(k, t) for k, t in body if t.strip()]
    changed = [i for i, (k, _) in enumerate(body) if k != " "]
    if not changed:
        return [t for _, t in body], [], []
    lo, hi = changed[0], changed[-1]
    return [t for _, t in body[:lo]], body[lo:hi + 1], [t for _, t in body[hi + 1:]]


def hunk_presence(file_lines: list[str], hunk: Hunk) -> Presence:
    """Is ``hunk``'s change in effect in a file of ``file_lines``? (See the module docstring.)"""
    before, region, after = _split(hunk)
    if not region:
        return Presence(False, "the hunk changes only blank lines: nothing to look for")
    text = [norm(ln) for ln in file_lines]
    keep = [i for i, t in enumerate(text) if t.strip()]
    lines = [text[i] for i in keep]

    core = [t for k, t in region if k != "-"]
    removed = [t for k, t in region if k != "+"]  # the pre-image of the region, for rule 3
    pure_removal = not any(k == "+" for k, _ in region)
    if pure_removal:
        core = before[-1:] + after[:1]
        if len(core) < 2:
            return Presence(False, "a removal at the file's edge: no neighbours to check adjacency")
    starts = _find_all(lines, core)
    if not starts:
        return Presence(False, "its resulting lines are not in the file")

    candidates = []
    for s in starts:
        e = s + len(core)
        # context that still matches right next to the core (drift stops the walk, not the match)
        nb = 0
        while nb < len(before) - (1 if pure_removal else 0) and s - 1 - nb >= 0 and \
                lines[s - 1 - nb] == before[len(before) - (2 if pure_removal else 1) - nb]:
            nb += 1
        na = 0
        while na < len(after) - (1 if pure_removal else 0) and e + na < len(lines) and \
                lines[e + na] == after[na + (1 if pure_removal else 0)]:
            na += 1
        lo, hi = max(s - len(before) - MARGIN, 0), min(e + len(after) + MARGIN, len(lines))
        still_there = [r for r in removed if r not in core and r in lines[lo:hi]]
        evidence = sum(weight(t) for t in lines[s - nb:e + na])
        candidates.append((s, nb, na, evidence, still_there))

    live = [c for c in candidates if not c[4]]
    if not live:
        s, _, _, _, still = candidates[0]
        return Presence(False, f"its lines are there, but so is a line it removes: {still[0].strip()!r}")
    best = max(live, key=lambda c: (c[1] + c[2], c[3]))
    s, nb, na, evidence, _ = best
    if evidence < MIN_EVIDENCE:
        return Presence(False, f"too generic to match by content (evidence {evidence} < {MIN_EVIDENCE})")
    ties = [c for c in live if c[1] + c[2] == nb + na]
    if len(ties) > 1:
        return Presence(False, f"its resulting lines occur {len(ties)} times and the context picks none")
    line_no = keep[s] + 1
    drift = (len(before) - nb) + (len(after) - na)
    how = f"content match at line {line_no}" + (f" ({drift} context line(s) drifted)" if drift else "")
    return Presence(True, how)
