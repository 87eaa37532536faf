"""Write the commits above ``base`` in the build tree back to patches/, canonically.

One mail per commit, with Electron's stable options: no stat, no signature, a zeroed From
line, full index lines (so 3-way keeps working), subjects kept as they are, renames detected
the same way everywhere. Author and date come from the commit, which ``git am`` preserved
from the mail, so re-exporting an unchanged stack changes no byte. A commit keeps its series
file name when its subject matches a listed patch; a new commit gets one in the group of the
commit before it. A commit without the metadata trailers is refused.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from . import git
from .apply import Project, _commits, _dirty, read_state
from .errors import ToolError
from .series import GROUPS, metadata_problems, parse_trailers, read_series

FORMAT_PATCH = ("-c", "diff.renames=true", "-c", "diff.noprefix=false", "-c", "diff.mnemonicPrefix=false",
                "-c", "format.signature=", "-c", "core.abbrev=40",
                "format-patch", "--stdout", "--no-stat", "--no-signature", "--zero-commit", "--full-index",
                "--keep-subject", "--no-numbered", "--no-notes", "--binary", "--no-thread", "--encode-email-headers")
SERIES_PREAMBLE = """# The order in which tools/apply.py replays the patches on the base.
# One patch file per line, relative to patches/; comment headers name the groups.
"""


def mail(tree: Path, commit: str) -> str:
    # not stripped: a patch may end in a context line that is a single space
    return git.run(tree, *FORMAT_PATCH, "-1", commit).stdout


def _slug(subject: str) -> str:
    s = re.sub(r"^\[[^\]]*\]\s*", "", subject)
    return re.sub(r"[^a-z0-9]+", "-", s.lower()).strip("-")[:52].rstrip("-") or "patch"


def series_text(by_group: dict[str, list[str]]) -> str:
    parts = [SERIES_PREAMBLE]
    for group in GROUPS:
        parts.append(f"\n# {group}\n" + "".join(f"{name}\n" for name in by_group.get(group, [])))
    return "".join(parts)


def export_tree(project: Project, tree: Path, dest: Path | None = None) -> list[str]:
    """Export ``tree`` into ``dest`` (default patches/); return the written patch names.

    Export never loses work: it refuses while the tree holds edits it would not export, and it
    overwrites or deletes a patch file only when that file is still the one the tree was built
    from (so a patch edited or added in patches/ since then is never clobbered).
    """
    dest = dest or project.patches_dir
    tree = tree.resolve()
    if not (tree / ".git").exists() or git.rev(tree, "base") is None:
        raise ToolError(f"{tree}: no build tree with a `base` tag; run tools/apply.py first")
    if git.am_in_progress(tree):
        raise ToolError(f"{tree}: a git am is in progress; finish it with --continue first")
    state = read_state(tree) or {}
    if state.get("run"):
        raise ToolError(f"{tree}: a run stopped there; finish it with --continue (or --abort) before exporting")
    dirty = _dirty(tree)
    if dirty:
        raise ToolError(f"{tree}: refusing to export, {len(dirty)} paths hold uncommitted or untracked edits the "
                        f"export would not include: {', '.join(line[3:] for line in dirty[:8])}"
                        + (", …" if len(dirty) > 8 else "") + ". Commit them (with the trailers of "
                        "patches/FORMAT.md) or discard them, then export again")
    commits = _commits(tree)
    if commits and git.out(tree, "log", "-1", "--format=%s", commits[-1]).startswith("overlay: ") and \
            git.out(tree, "log", "-1", "--format=%ae", commits[-1]) == git.TOOL_EMAIL:
        commits = commits[:-1]  # the overlay commit is made from overlay/, not exported
    _refuse_overlay_edits(project, tree, commits)
    current = read_series(project.patches_dir).patches
    by_subject: dict[str, list] = {}
    for p in current:
        by_subject.setdefault(p.subject, []).append(p)  # same subject twice: matched in series order
    by_group: dict[str, list[str]] = {}
    written, problems, group = [], [], GROUPS[0]
    mails = []
    empty = []
    for c in commits:
        subject = git.out(tree, "log", "-1", "--format=%s", c)
        if git.run(tree, "diff-tree", "--quiet", f"{c}^", c, check=False).returncode == 0:
            empty.append((c, subject))  # nothing to carry: never written as an empty patch
            continue
        message = git.out(tree, "log", "-1", "--format=%B", c)
        bad = metadata_problems(parse_trailers(message))
        if bad:
            problems.append(f"commit {c[:12]} {subject!r}: " + "; ".join(bad))
            continue
        known = by_subject.get(subject, []).pop(0) if by_subject.get(subject) else None
        if known:
            name, group = known.name, known.group or group
        else:
            taken = {n for names in by_group.values() for n in names} | {p.name for p in current} | {
                f.relative_to(dest).as_posix() for f in (dest / group).glob("*.patch")}
            nums = [int(m.group(1)) for n in taken if (m := re.match(rf"{re.escape(group)}/(\d+)-", n))]
            name = f"{group}/{max(nums, default=0) + 1:04d}-{_slug(subject)}.patch"
        by_group.setdefault(group, []).append(name)
        mails.append((name, mail(tree, c)))
    if problems:
        raise ToolError("refusing to export commits without metadata (add the trailers of patches/FORMAT.md "
                        "with `git commit --amend` or `git rebase -i`):\n  " + "\n  ".join(problems))
    keep = {name for name, _ in mails}
    for c, subject in empty:
        print(f"skipped {c[:12]} {subject!r}: an empty commit (upstream has its change, or it was "
              "emptied by hand); no patch is written for it", file=sys.stderr)
    entries = {p["file"]: p.get("ledger_entry") for p in state.get("patches", [])}
    if dest == project.patches_dir:
        _refuse_clobbering(project, tree, state, current, mails)
        for p in current:
            if p.name not in keep:
                p.path.unlink()  # dropped from the stack
                if entries.get(p.name):
                    print(f"dropped {p.name}: upstream has it; add to patches/UPSTREAMED.toml:\n"
                          f"{entries[p.name]}", file=sys.stderr)
                else:
                    print(f"dropped {p.name}: no commit of it in {tree}", file=sys.stderr)
    for name, _ in mails:
        if dest == project.patches_dir and (entry := entries.get(name)):
            print(f"refreshed {name}: upstream has part of it; add to patches/UPSTREAMED.toml:\n{entry}",
                  file=sys.stderr)
    for name, text in mails:
        path = dest / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text() != text:
            _write_whole(path, text)
        written.append(name)
    _write_whole(dest / "series", series_text(by_group))
    return written


def _write_whole(path: Path, text: str) -> None:
    # an export killed half-way leaves each file either as it was or complete, never truncated
    tmp = path.with_name(f".{path.name}.export-tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _refuse_overlay_edits(project: Project, tree: Path, commits: list[str]) -> None:
    """A commit changing a file the overlay provides would become a patch that cannot apply (the
    overlay is copied after the series): the change belongs in overlay/."""
    from . import overlay

    owned = {e.path for e in overlay.read_manifest(project.overlay_dir)}
    if not owned or not commits:
        return
    for c in commits:
        touched = set(git.out(tree, "diff-tree", "--no-commit-id", "--name-only", "-r", "-z", c).split("\0"))
        hit = sorted(touched & owned)
        if hit:
            raise ToolError(f"commit {c[:12]} changes {', '.join(hit)}, which overlay/ provides; refusing to export "
                            f"it as a patch. Make the change in overlay/{hit[0]} (and drop the commit)")


def _refuse_clobbering(project: Project, tree: Path, state: dict, current: list, mails: list) -> None:
    """Refuse when a patch file export would delete or rewrite is not the one the tree was built from."""
    import hashlib

    built = {p.get("file"): p.get("sha256") for p in state.get("patches", [])}
    texts = dict(mails)
    changed = []
    for p in current:
        if texts.get(p.name) is not None and p.path.read_text() == texts[p.name]:
            continue  # unchanged by this export
        if built.get(p.name) != hashlib.sha256(p.path.read_bytes()).hexdigest():
            changed.append(f"patches/{p.name}")
    if changed:
        raise ToolError(f"refusing to export: {', '.join(changed)} changed or appeared in patches/ since {tree} "
                        "was built, and the export would overwrite or delete it. Apply first "
                        "(python tools/apply.py) so the tree holds it, then edit and export there")
