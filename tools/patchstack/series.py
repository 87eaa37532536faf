"""The series file, patch mails and their typed metadata.

``patches/series`` lists patch files (relative to ``patches/``) in order; ``# name`` comment
lines open a group. Each patch is a ``git format-patch`` mail whose message ends with the
trailers below; ``lint`` checks them with Yocto's conditional rules.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from email.header import decode_header, make_header
from pathlib import Path

from . import schema
from .errors import ToolError

GROUPS = ("dspark", "block-verification", "sm120", "tilelang")
FIELDS = ("Upstream-Status", "Upstream-PR", "Drop-When", "Reason")
# Yocto's vocabulary; the value in brackets is required where True
STATUSES = {"Pending": False, "Submitted": True, "Backport": True, "Denied": False, "Inappropriate": True}
_STATUS_RE = re.compile(r"^(?P<word>[A-Za-z]+)(?:\s*\[(?P<arg>[^\]]*)\])?\s*$")
# the first line of each mail in git format-patch output (the commit id is zeroed by --export)
_MAIL_START = re.compile(r"^From [0-9a-f]{40} Mon Sep 17 00:00:00 2001$", re.M)
_PR_RE = re.compile(r"^(none|#\d+|https?://\S+|[0-9a-f]{7,40})$")


@dataclass
class Patch:
    name: str  # path relative to patches/, as listed in the series
    group: str | None
    path: Path
    subject: str = ""
    author: str = ""
    meta: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"file": self.name, "group": self.group, "subject": self.subject, **{
            k.lower().replace("-", "_"): v for k, v in self.meta.items()}}


@dataclass
class Series:
    root: Path  # the patches/ directory
    patches: list[Patch]
    problems: list[str]


def read_series(patches_dir: Path) -> Series:
    series_file = patches_dir / "series"
    text = schema.read_text(series_file, patches_dir, "the list of patch files, one per line")
    problems, patches, seen, group = [], [], set(), None
    for lineno, raw in enumerate(text.removeprefix("\ufeff").splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            word = line.lstrip("#").strip()
            if word in GROUPS:
                group = word
            continue
        where = f"{series_file}:{lineno}"
        if line in seen:
            problems.append(f"{where}: {line} listed twice")
            continue
        seen.add(line)
        path = patches_dir / line
        if why := schema.safe_relpath(line):
            problems.append(f"{where}: {line!r} {why}; expected a path inside patches/")
            continue
        if (path.exists() or path.is_symlink()) and not schema.inside(path, patches_dir):
            problems.append(f"{where}: {line} points outside patches/ (to {path.resolve()}); "
                            "a patch must be a file inside patches/")
            continue
        if not path.is_file():
            kind = schema.special(path) or ("a directory" if path.is_dir() else "")
            problems.append(f"{where}: {line} is listed but " + (f"is {kind}, not a patch file" if kind
                                                                  else "the file is missing"))
            continue
        patch = Patch(name=line, group=group, path=path)
        try:
            parse_mail(patch)
        except ToolError as e:
            problems.append(str(e))
            continue
        patches.append(patch)
        problems += [f"{path}: {p}" for p in metadata_problems(patch.meta)]
    listed = seen
    for path in sorted(patches_dir.rglob("*.patch")):
        rel = path.relative_to(patches_dir).as_posix()
        if rel not in listed:
            problems.append(f"{path}: not listed in {series_file}")
    return Series(root=patches_dir, patches=patches, problems=problems)


def parse_mail(patch: Patch) -> None:
    """Fill subject, author and metadata from a format-patch mail; reject what git am would not take."""
    data = patch.path.read_bytes()
    if data.startswith(b"From ") and data.split(b"\n", 1)[0].endswith(b"\r"):
        raise ToolError(f"{patch.path}: has CRLF (Windows) line endings, which git format-patch never writes "
                        "(an editor or core.autocrlf converted it); convert it back to LF line endings")
    text = data.decode("utf-8", errors="replace")
    mails = len(_MAIL_START.findall(text))
    if mails > 1:
        raise ToolError(f"{patch.path}: holds {mails} mails (git format-patch output of {mails} commits); "
                        "one patch per file: split it and list each file in patches/series")
    head, sep, rest = text.partition("\n\n")
    if not sep or not head.startswith("From ") and "\nFrom:" not in "\n" + head:
        raise ToolError(f"{patch.path}: not a git format-patch mail (no mail header)")
    headers = _headers(head)
    if "subject" not in headers or "from" not in headers:
        raise ToolError(f"{patch.path}: mail header lacks From: or Subject:")
    patch.subject = headers["subject"]
    patch.author = headers["from"]
    message, sep, diff = rest.partition("\n---\n")
    if not sep:
        message, sep, diff = rest.partition("\ndiff --git ")
        diff = "diff --git " + diff
    if "diff --git " not in diff:
        raise ToolError(f"{patch.path}: contains no diff")
    patch.meta = parse_trailers(message)


def _headers(head: str) -> dict[str, str]:
    out: dict[str, str] = {}
    key = None
    for line in head.splitlines()[1:] if head.startswith("From ") else head.splitlines():
        if line[:1] in (" ", "\t") and key:
            out[key] += " " + line.strip()
        elif ":" in line:
            key, _, value = line.partition(":")
            key = key.strip().lower()
            out[key] = value.strip()
    return {k: str(make_header(decode_header(v))) for k, v in out.items()}


def parse_trailers(message: str) -> dict[str, str]:
    meta = {}
    for line in message.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() in FIELDS:
            meta[key.strip()] = value.strip()
    return meta


def metadata_problems(meta: dict[str, str]) -> list[str]:
    problems = [f"missing {f}:" for f in FIELDS if not meta.get(f)]
    status = meta.get("Upstream-Status")
    if status:
        m = _STATUS_RE.match(status)
        if not m or m.group("word") not in STATUSES:
            problems.append(f"Upstream-Status: {status!r} is not one of {', '.join(STATUSES)}")
        elif STATUSES[m.group("word")] and not (m.group("arg") or "").strip():
            need = {"Submitted": "where", "Backport": "version", "Inappropriate": "reason"}[m.group("word")]
            problems.append(f"Upstream-Status: {m.group('word')} needs [{need}]")
        elif m.group("word") in ("Submitted", "Backport") and meta.get("Upstream-PR") == "none":
            problems.append(f"Upstream-PR: {m.group('word')} needs the upstream PR or commit, not 'none'")
    pr = meta.get("Upstream-PR")
    if pr and not _PR_RE.match(pr):
        problems.append(f"Upstream-PR: {pr!r} is not a PR URL, #number, commit sha or 'none'")
    return problems


def status_word(meta: dict[str, str]) -> str:
    m = _STATUS_RE.match(meta.get("Upstream-Status", ""))
    return m.group("word") if m else ""
