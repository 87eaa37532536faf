"""Series + overlay into the build tree, with continue / abort.

The build tree is a git repository: the base commit (tag ``base``), one commit per patch made
by ``git am`` exactly (``--3way`` only when asked, and reported per patch), then the overlay as
one commit. Commits get a fixed committer and the mail's date, so the same base and series give
the same commit ids everywhere.

Progress is derived from the tree itself (commits above ``base`` = patches applied), so an
interrupted run can always be continued or aborted; the state file in the tree's git directory
only remembers what the tree cannot say: where HEAD was before the run, the base, the options.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from . import git, hunks, overlay
from . import report as report_mod
from .errors import ToolError
from .series import Patch, read_series
from .sources import Base, bases_repo

BRANCH = "patched"
STATE_DIR = "vllm-overlay"
RECOVERY_PREFIX = "refs/overlay-recovery/"
# The overlay commit's date: fixed, like the committer, so its id depends only on content.
OVERLAY_DATE = "2000-01-01T00:00:00Z"
# Rewritten by every `pip install -e` of the tree (setuptools-scm output, tracked because the
# sdist ships it): a change there is the install's, not a person's work.
INSTALL_OUTPUTS = {"vllm/_version.py"}
# statuses with which a run stops and waits for a person
COMMITTED = ("applied", "applied-3way", "partly-upstream")  # statuses of a patch with a commit
STOPS = ("conflict", "target-missing", "error")


@dataclass(frozen=True)
class Project:
    root: Path

    @property
    def patches_dir(self) -> Path:
        return self.root / "patches"

    @property
    def overlay_dir(self) -> Path:
        return self.root / "overlay"

    @property
    def version_file(self) -> Path:
        return self.root / "VERSION"


def check_layout(project: Project) -> None:
    """patches/ and overlay/ are the project's own directories, not symlinks to elsewhere."""
    from .schema import inside

    for d in (project.patches_dir, project.overlay_dir):
        if d.is_symlink() and not inside(d, project.root):
            raise ToolError(f"{d}: is a symlink to {d.resolve()}, outside the project; the tool reads only "
                            "files inside the project")


def load_series(project: Project) -> list[Patch]:
    check_layout(project)
    series = read_series(project.patches_dir)
    if series.problems:  # the first problem on the error line, the others below it
        more = series.problems[1:]
        raise ToolError(series.problems[0] + (f"\n  and {len(more)} more problem(s) in the series:\n  "
                                              + "\n  ".join(more) if more else ""))
    return series.patches


# --- state ------------------------------------------------------------------------------------

def _state_path(tree: Path) -> Path:
    return git.git_dir(tree) / STATE_DIR / "state.json"


def read_state(tree: Path) -> dict | None:
    """The tree's state, None when there is none; a damaged state file is an error naming it."""
    try:
        path = _state_path(tree)
        state = json.loads(path.read_text())
    except (FileNotFoundError, NotADirectoryError, ToolError):
        return None
    except (ValueError, OSError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise ToolError(f"{path}: the tool's state file is damaged ({e.__class__.__name__}: {e})") from None
    if not isinstance(state, dict) or not isinstance(state.get("run", {}), dict):
        raise ToolError(f"{path}: the tool's state file is damaged (expected a JSON object)")
    return state


def _unborn_and_empty(tree: Path) -> bool:
    """A tree a killed first run left right after `git init`: no commits, no files, nothing to lose."""
    return git.rev(tree, "HEAD") is None and not git.out(
        tree, "status", "--porcelain", "--untracked-files=all", "--ignored")


def _write_state(tree: Path, state: dict) -> None:
    path = _state_path(tree)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=2))
    os.replace(tmp, path)


# --- the build tree ---------------------------------------------------------------------------

def check_outputs(project: Project, tree: Path | None, report_path: Path | None) -> None:
    """Refuse output paths that cannot work, before any download or build."""
    def blocker(path: Path) -> Path | None:  # the first existing ancestor that is not a directory
        for parent in list(reversed(path.parents)):
            if parent.exists() and not parent.is_dir():
                return parent
        return None

    if tree is not None:
        if tree.exists() and not tree.is_dir():
            raise ToolError(f"--out {tree}: is a file, expected a directory for the build tree")
        if (b := blocker(tree)) is not None:
            raise ToolError(f"--out {tree}: {b} is a file, not a directory")
        for inner in (project.patches_dir, project.overlay_dir):
            if tree.resolve().is_relative_to(inner.resolve()) or inner.resolve().is_relative_to(tree.resolve()):
                raise ToolError(f"--out {tree}: overlaps the project's {inner.name}/; choose a build tree "
                                "outside patches/ and overlay/")
    if report_path is not None:
        if report_path.is_dir():
            raise ToolError(f"--report {report_path}: is a directory, expected a file path")
        if (b := blocker(report_path)) is not None:
            raise ToolError(f"--report {report_path}: {b} is a file, not a directory")
        if tree is not None and report_path.resolve().is_relative_to(tree.resolve()):
            raise ToolError(f"--report {report_path}: inside the build tree {tree}, where it would count as "
                            "untracked work; write it next to the tree")


def after_interrupt(tree: Path) -> str:
    """What to do after Ctrl-C, from what the tree says (the run may not have reached it yet)."""
    try:
        state = read_state(tree) if (tree / ".git").exists() else None
    except ToolError:
        state = None
    if state and state.get("run"):
        return f"run `python tools/apply.py --continue` or `--abort` for {tree}"
    return f"{tree} was not changed by this run (or only created empty); run the command again"


def _foreign_work(tree: Path, state: dict | None) -> list[str]:
    """What in ``tree`` this tool did not make: uncommitted changes, other commits, a stopped am."""
    found = []
    if state is None:
        found.append("it was not made by tools/apply.py (no state in its git directory)")
    elif state.get("run"):
        found.append("an earlier run stopped there: finish it with --continue or undo it with --abort")
    if git.am_in_progress(tree):
        found.append("a `git am` is in progress")
    dirty = _dirty(tree)
    if dirty:
        shown = ", ".join(line[3:] for line in dirty[:5]) + (", …" if len(dirty) > 5 else "")
        found.append(f"{len(dirty)} uncommitted or untracked paths ({shown})")
    head = git.rev(tree, "HEAD")
    if state and state.get("head") and head != state["head"]:
        extra = git.out(tree, "log", "--oneline", "-5", f"{state['head']}..HEAD", check=False)
        found.append(f"HEAD {str(head)[:12]} is not the {state['head'][:12]} this tool left"
                     + ("; commits not made by the tool:\n      " + extra.replace("\n", "\n      ") if extra else ""))
    return found


def _dirty(tree: Path) -> list[str]:
    """`git status --porcelain` lines of work in the tree (uncommitted or untracked), install outputs aside."""
    return [line for line in git.run(tree, "status", "--porcelain", "--untracked-files=normal").stdout.splitlines()
            if not (line[:3] == " M " and line[3:] in INSTALL_OUTPUTS)]


def save_recovery(tree: Path) -> str:
    """Keep HEAD plus any uncommitted work (untracked files too) under a recovery ref; return its name."""
    ref = RECOVERY_PREFIX + dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S%fZ")
    head = git.rev(tree, "HEAD")
    idx = git.git_dir(tree) / STATE_DIR / "recovery-index"
    idx.parent.mkdir(parents=True, exist_ok=True)
    env = dict(git.tool_env(), GIT_INDEX_FILE=str(idx))
    try:
        if head:
            git.run(tree, "read-tree", head, env=env)
        git.run(tree, "add", "-A", env=env)
        treeid = git.out(tree, "write-tree", env=env)
    finally:
        idx.unlink(missing_ok=True)
    if head and treeid == git.out(tree, "rev-parse", f"{head}^{{tree}}"):
        commit = head
    else:
        commit = git.out(tree, "commit-tree", treeid, *(["-p", head] if head else []), "-m",
                         "recovery: work found in the build tree before tools/apply.py --force", env=env)
    git.run(tree, "update-ref", ref, commit)
    return ref


def prepare_tree(tree: Path, base: Base, force: bool) -> tuple[str | None, str | None, dict | None]:
    """Make ``tree`` a clean checkout of the base; return (previous HEAD, recovery ref, previous state)."""
    if tree.exists() and not (tree / ".git").exists() and any(tree.iterdir()):
        raise ToolError(f"{tree}: exists and is not a git repository; refusing to write into it "
                        "(move it away or choose --out)")
    if not (tree / ".git").exists():
        git.init(tree)
        git.run(tree, "config", "core.untrackedCache", "true")  # the safety check runs `git status` each time
        state, recovery = None, None
    else:
        try:
            state = read_state(tree)
            found = [] if state is None and _unborn_and_empty(tree) else _foreign_work(tree, state)
        except ToolError as e:  # a damaged state file: the tree is treated as holding foreign work
            state, found = None, [str(e)]
        recovery = None
        if found:
            if not force:
                raise ToolError(f"{tree}: refusing to rebuild, it holds work this tool did not make:\n  - "
                                + "\n  - ".join(found)
                                + "\n  Commit or move that work, or rerun with --force to save it under "
                                  f"{RECOVERY_PREFIX}<time> first.")
            recovery = save_recovery(tree)
            if git.am_in_progress(tree):
                git.run(tree, "am", "--quit")
            print(f"saved the tree's previous state as {recovery}", file=sys.stderr)
    previous_head = git.rev(tree, "HEAD")
    if not git.has_commit(tree, base.commit):
        # depth 1: a git base is a shallow fetch, and the tree needs only the base commit itself
        git.run(tree, "fetch", "-q", "--no-tags", "--depth=1", str(bases_repo()), base.commit)
    return previous_head, recovery, (state if state and not state.get("run") else None)


def _digest(patch: Patch) -> str:
    return hashlib.sha256(patch.path.read_bytes()).hexdigest()


def reusable_prefix(previous: dict | None, base: Base, patches: list[Patch]) -> list[dict]:
    """Commits of the last clean run that this run would make again, byte for byte.

    Commits are reproducible (fixed committer, the mail's date), so a patch whose mail is
    unchanged, on the same parent, gives the same commit: keep the longest such prefix and
    apply from the first patch that changed (Brave's per-patch checksum idea). Only exact
    applications are kept; a 3-way result is redone.
    """
    if not previous or previous.get("base", {}).get("commit") != base.commit:
        return []
    kept = []
    for patch, old in zip(patches, previous.get("patches", []), strict=False):
        if old.get("file") != patch.name or old.get("sha256") != _digest(patch) or old.get("status") != "applied":
            break
        kept.append(old)
    return kept


# --- applying ---------------------------------------------------------------------------------

def _am(tree: Path, paths: list[Path], three_way: bool) -> tuple[bool, str]:
    args = ["am", "--keep", "--keep-cr", "--committer-date-is-author-date", "--quiet", "--whitespace=nowarn"]
    if three_way:
        args.append("--3way")
    proc = git.run(tree, *args, *map(str, paths), env=git.tool_env(author=False), check=False)
    return proc.returncode == 0, (proc.stdout + proc.stderr).strip()


def applied_count(tree: Path) -> int:
    return int(git.out(tree, "rev-list", "--count", "base..HEAD"))


def diagnose(tree: Path, patch: Patch, treeish: str = "HEAD") -> dict:
    """Which files and hunks of ``patch`` do not apply to ``treeish``, and what upstream has there now."""
    files, failing, missing = [], [], []
    text = patch.path.read_text(errors="replace")
    for f in hunks.parse(text):
        if f.old_path and not hunks.file_exists(tree, treeish, f.old_path):
            missing.append(f.old_path)
            continue
        bad = [h for h in f.hunks if not hunks.check(tree, treeish, hunks.mini_patch(f, h))]
        if bad or (not f.hunks and not hunks.check(tree, treeish, "\n".join(f.header) + "\n")):
            files.append(f.path)
        for h in bad:
            failing.append({"file": f.path, "hunk": h.header,
                            "mismatch": hunks.mismatch(tree, treeish, f.path, h, creates=f.old_path is None)})
    return {"files": files, "hunks": failing, "missing_files": missing}


def _conflict_details(d: dict) -> list[str]:
    lines = [hunks.missing_target(m) for m in d["missing_files"]]
    for h in d["hunks"]:
        lines.append(f"{h['file']}: {h['hunk']}")
        lines.append(f"    {h['mismatch']}")
    return lines


def _sync(tree: Path, patches: list[Patch], results: list[dict]) -> int:
    """Bring ``results`` in line with the commits above base; return how many patches are done.

    A patch dropped as already upstream (a 3-way apply that changed nothing) has no commit: the
    commits map, in order, to the patches that were not dropped.
    """
    commits = _commits(tree)
    synced: list[dict] = []
    n = 0
    for i, patch in enumerate(patches):
        prev = results[i] if i < len(results) else None
        if prev is not None and prev["status"] == "already-upstream":
            synced.append(prev)
            continue
        if n == len(commits):
            break
        if prev is None or prev["status"] not in COMMITTED:
            r = _result(patch, "applied")
            if prev is not None and prev["status"] in ("conflict", "target-missing", "error"):
                r["resolved_by_hand"] = True
            prev = r
        prev["commit"] = commits[n]
        synced.append(prev)
        n += 1
    if n < len(commits):
        raise ToolError(f"{tree}: {len(commits)} commits above base but only {n} patches of the run to match them")
    results[:] = synced
    return len(synced)


def copy_preimages(tree: Path, patch: Patch) -> None:
    """Give a 3-way merge the blobs the patch was made against (a shallow tree lacks the old base)."""
    wanted = set(re.findall(r"^index ([0-9a-f]{40})\.\.", patch.path.read_text(errors="replace"), re.M))
    for blob in sorted(wanted - {"0" * 40}):
        if git.run(tree, "cat-file", "-e", blob, check=False).returncode == 0:
            continue
        data = git.run(bases_repo(), "cat-file", "blob", blob, check=False, text=False)
        if data.returncode == 0:
            git.run(tree, "hash-object", "-w", "--stdin", input=data.stdout, text=False)


def run_series(tree: Path, patches: list[Patch], results: list[dict], three_way: bool, save) -> bool:
    """Apply the patches not yet committed; keep one result per patch. False when stopped at a conflict."""
    while (i := _sync(tree, patches, results)) < len(patches):
        ok, output = _am(tree, [p.path for p in patches[i:]], three_way=False)
        k = _sync(tree, patches, results)
        save()
        if ok:
            continue
        stuck = patches[k]
        if three_way:
            git.run(tree, "am", "--quit")
            copy_preimages(tree, stuck)
            head = git.rev(tree, "HEAD")
            ok, output = _am(tree, [stuck.path], three_way=True)
            if ok:
                # git am says "No changes -- Patch already applied" and makes no commit when the
                # merge changes nothing: then HEAD is still `head` and dropped_hunks says "all"
                dropped = hunks.dropped_hunks(tree, head, git.rev(tree, "HEAD"), stuck.path.read_text(errors="replace"))
                results.append(three_way_verdict(stuck, dropped))
                _sync(tree, patches, results)
                save()
                continue
        # diagnose against HEAD (the tree before the stuck patch), via a scratch index
        d = diagnose(tree, stuck)
        status = "target-missing" if d["missing_files"] and not d["hunks"] else "conflict"
        if not d["missing_files"] and not d["hunks"]:
            status = "error"
            d["error"] = output.splitlines()[-1] if output else "git am failed"
        r = _result(stuck, status, **d)
        r["details"] = _conflict_details(d) + ([d["error"]] if d.get("error") else [])
        results.append(r)
        results += [_result(p, "not-applied") for p in patches[k + 1:]]
        save()
        return False
    return True


def three_way_verdict(patch: Patch, dropped: list[str] | str, commit: str | None = None) -> dict:
    """The result of a 3-way apply of ``patch``, from what it left out (hunks.dropped_hunks):
    nothing changed ("all": upstream has the patch, no commit, --export drops it), some hunks
    left out (upstream has those; --export writes the patch without them), or none."""
    if dropped == "all":
        return _result(patch, "already-upstream", how="3-way no-op",
                       details=["a 3-way merge leaves the tree as it was: upstream has every change; "
                                "not carried any more (no commit)"])
    if dropped:
        return _result(patch, "partly-upstream", commit=commit, how="3-way dropped hunks", three_way=True,
                       hunks_upstream=[{"hunk": d, "how": "3-way dropped it"} for d in dropped],
                       details=[f"already upstream (3-way dropped it): {d}" for d in dropped])
    return _result(patch, "applied-3way", commit=commit)


def _commits(tree: Path) -> list[str]:
    return git.out(tree, "rev-list", "--reverse", "base..HEAD").split()


def _result(p: Patch, status: str, commit: str | None = None, **extra) -> dict:
    return {"file": p.name, "group": p.group, "subject": p.subject, "status": status, "commit": commit,
            "upstream_status": p.meta.get("Upstream-Status"), "upstream_pr": p.meta.get("Upstream-PR"),
            "drop_when": p.meta.get("Drop-When"), "reason": p.meta.get("Reason"), **extra}


def apply_overlay(project: Project, tree: Path, date: str) -> tuple[bool, list[dict]]:
    entries = overlay.read_manifest(project.overlay_dir)
    results = overlay.check(entries, project.overlay_dir, tree, "base")
    if any(r["status"] != "applied" for r in results):
        return False, results
    if entries:
        overlay.copy(entries, project.overlay_dir, tree)
        # plumbing instead of `git add` + `git commit`: no refresh of the 9,000-file index
        blobs = git.out(tree, "hash-object", "-w", "--", *[e.path for e in entries]).split()
        git.run(tree, "update-index", "--add", "--index-info",
                input="".join(f"{'100755' if os.access(tree / e.path, os.X_OK) else '100644'} {b}\t{e.path}\n"
                              for b, e in zip(blobs, entries, strict=True)))
        msg = "overlay: {} file(s) from overlay/\n\n{}\n".format(
            len(entries), "\n".join(f"{e.kind}: {e.path}" for e in entries))
        treeid = git.out(tree, "write-tree")
        commit = git.out(tree, "commit-tree", treeid, "-p", "HEAD", "-m", msg, env=git.tool_env(date=date))
        git.run(tree, "update-ref", "-m", "overlay", "HEAD", commit)
        for r in results:
            r["commit"] = commit
    return True, results


# --- entry points -----------------------------------------------------------------------------

def build(project: Project, base: Base, tree: Path, report_path: Path, three_way: bool,
          force: bool, overlay_version: str, full: bool = False) -> dict:
    patches = load_series(project)
    overlay.read_manifest(project.overlay_dir)  # fail on a bad manifest before touching the tree
    tree = tree.resolve()
    previous_head, recovery, previous_state = prepare_tree(tree, base, force)
    kept = [] if full or recovery else reusable_prefix(previous_state, base, patches)
    results = [dict(_result(p, "applied", commit=old["commit"]), reused=True)
               for p, old in zip(patches, kept, strict=False)]
    run = {"previous_head": previous_head, "previous_state": previous_state, "recovery_ref": recovery,
           "base": base.to_json(), "three_way": three_way, "patches": [p.name for p in patches],
           "report": str(report_path), "overlay_version": overlay_version, "results": results,
           "start": kept[-1]["commit"] if kept else base.commit, "started": False}
    # the state first, then the tree moves: killed at any point after this, --continue and --abort work
    _write_state(tree, {"run": run})
    print(f"applying {len(patches) - len(kept)} of {len(patches)} patches to {tree} (base {base.commit[:12]}"
          + (f"; {len(kept)} unchanged commits kept" if kept else "") + ")", file=sys.stderr)
    return _resume(project, tree, patches, run)


def continue_(project: Project, tree: Path) -> dict:
    tree = tree.resolve()
    run = _run_state(tree)
    patches = _patches_of(project, run)
    if git.am_in_progress(tree) and not any(r["status"] in STOPS for r in run["results"]):
        # the run was killed inside `git am` before it could record a stop: nothing here is a
        # person's resolution, so drop am's state and let the tree say how far it got
        if _dirty(tree):
            print(f"saved the interrupted `git am`'s files as {save_recovery(tree)}", file=sys.stderr)
        git.run(tree, "am", "--quit")
        git.run(tree, "reset", "-q", "--hard", "HEAD")
    if git.am_in_progress(tree):
        proc = git.run(tree, "am", "--continue", env=git.tool_env(author=False), check=False)
        if proc.returncode != 0:
            raise ToolError(f"{tree}: `git am --continue` failed:\n{(proc.stdout + proc.stderr).strip()}\n"
                            "Resolve the files, `git add` them, then run --continue again (or --abort).",
                            exit_code=1)
    return _resume(project, tree, patches, run)


def abort(project: Project, tree: Path) -> str:
    """Undo a stopped or interrupted run; return what happened, for one line of output."""
    tree = tree.resolve()
    if (tree / ".git").exists() and read_state(tree) is None and _unborn_and_empty(tree):
        # killed right after `git init` of a first build: before the run the tree did not exist
        shutil.rmtree(tree / ".git")
        if not any(tree.iterdir()):
            tree.rmdir()
        return f"{tree} was an unfinished first build holding nothing; removed it"
    run = _run_state(tree)
    if git.am_in_progress(tree) and git.run(tree, "am", "--abort", check=False).returncode != 0:
        git.run(tree, "am", "--quit")  # an am killed half-way may not abort cleanly; the checkout below resets
    target = run["previous_head"] or run["base"]["commit"]
    git.run(tree, "checkout", "-q", "-f", "-B", BRANCH, target)
    if run.get("previous_state"):
        _write_state(tree, run["previous_state"])
    else:
        _write_state(tree, {"head": git.rev(tree, "HEAD"), "aborted": True})
    return f"{tree} is back at {target[:12]}"


def _run_state(tree: Path) -> dict:
    if not (tree / ".git").exists():
        raise ToolError(f"{tree}: no build tree here")
    state = read_state(tree)
    if not state or not state.get("run"):
        raise ToolError(f"{tree}: no stopped run to continue or abort")
    return state["run"]


def _patches_of(project: Project, run: dict) -> list[Patch]:
    by_name = {p.name: p for p in load_series(project)}
    missing = [n for n in run["patches"] if n not in by_name]
    if missing:
        raise ToolError(f"the series changed since the run stopped (gone: {', '.join(missing)}); use --abort")
    return [by_name[n] for n in run["patches"]]


def _start(tree: Path, run: dict) -> None:
    """Put the tree on the run's starting commit (base, or the kept prefix) with the `base` tag."""
    git.run(tree, "checkout", "-q", "-f", "-B", BRANCH, run["start"])
    git.run(tree, "tag", "-f", "base", run["base"]["commit"])
    run["started"] = True
    _write_state(tree, {"run": run})


def _resume(project: Project, tree: Path, patches: list[Patch], run: dict) -> dict:
    results = run["results"]
    if not run.get("started", True):
        _start(tree, run)

    def save():
        _write_state(tree, {"run": run})

    clean = run_series(tree, patches, results, run["three_way"], save)
    _name_upstream_changes(project, run, patches, results)
    overlay_results: list[dict] = []
    if clean:
        date = OVERLAY_DATE
        clean, overlay_results = apply_overlay(project, tree, date)
    rep = {
        "tool": "tools/apply.py", "mode": "apply", "overlay_version": run["overlay_version"],
        "tree": str(tree), "base": run["base"], "patches": results, "overlay": overlay_results,
        "head": git.rev(tree, "HEAD"), "recovery_ref": run.get("recovery_ref"),
        "result": "clean" if clean else "conflict",
    }
    if clean:
        by_name = {p.name: p for p in patches}
        _write_state(tree, {"head": rep["head"], "base": run["base"], "report": run["report"], "patches": [
            {"file": r["file"], "sha256": _digest(by_name[r["file"]]), "commit": r["commit"], "status": r["status"],
             **({"ledger_entry": r["ledger_entry"]} if r.get("ledger_entry") else {})}
            for r in results]})
    else:
        rep["next"] = _next_steps(tree, results, overlay_results)
    report_mod.write(rep, Path(run["report"]))
    return rep


def _name_upstream_changes(project: Project, run: dict, patches: list[Patch], results: list[dict]) -> None:
    """For a patch a 3-way apply found upstream (whole or in part): the upstream change, the
    decision and the ledger entry to add, as --status gives them."""
    from . import ledger, status
    from .pin import read_pin

    base = Base(**run["base"])
    for patch, r in zip(patches, results, strict=False):
        if r["status"] in status.UPSTREAM and "decision" not in r:
            r["upstream_change"] = status.name_upstream_change(
                bases_repo(), base, read_pin(project.version_file), patch, r)
            r["ledger_entry"] = ledger.entry_for(r, base)
            r["decision"] = status.decision(r, base)


def _next_steps(tree: Path, results: list[dict], overlay_results: list[dict]) -> str:
    stuck = next((r for r in results if r["status"] in STOPS), None)
    if stuck and stuck["status"] == "target-missing":
        return (f"{', '.join(stuck['missing_files'])} not in the base: find where upstream moved the code "
                f"(git log --follow), make the patch's change there in {tree}, `git add` it, then "
                "`python tools/apply.py --continue`; or `python tools/apply.py --abort`")
    if any(r["status"] != "applied" for r in overlay_results):
        return ("the overlay does not fit the base: update overlay/ and overlay/manifest.toml, then run "
                "`python tools/apply.py --continue` (or --abort)")
    return (f"fix the files in {tree} (`git am --show-current-patch=diff` shows the patch), `git add` them, "
            "then `python tools/apply.py --continue`; or `python tools/apply.py --abort` to return the tree "
            "to where it was")
