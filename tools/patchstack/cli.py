"""Command line: parse arguments, call one module per command, one fatal-error path."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import apply, lock, overlay, pin, report, sources
from .errors import ToolError

PROJECT_ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = """examples:
  python tools/apply.py                              build/vllm from the base pinned in VERSION
  python tools/apply.py --base pypi:0.33.0 --out build/vllm-0.33
                                                     another release, another tree
  python tools/apply.py --base nightly --status --report status.json
                                                     rebase check: what applies, conflicts, is upstream
  python tools/apply.py --base nightly --3way        rebase the tree; on a conflict fix, `git add`, then
  python tools/apply.py --continue                   ... or --abort to put the tree back
  python tools/apply.py --export                     commits above `base` in build/vllm -> patches/
  python tools/apply.py --check                      what CI checks: lint, exact apply, byte-exact re-export

exit status: 0 clean, 1 conflict or check failure, 2 bad input, 130 interrupted"""


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tools/apply.py", description=(
        "Replay patches/series and overlay/ on an upstream vLLM base into a git tree (default build/vllm)."),
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="store_true", help="print the overlay version and the pinned base, then exit")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--status", action="store_true",
                      help="classify every patch against --base in a scratch tree; build/ is not touched")
    mode.add_argument("--continue", dest="continue_", action="store_true",
                      help="after fixing a conflict in the build tree: finish the patch, apply the rest")
    mode.add_argument("--abort", action="store_true", help="undo a stopped run: the tree returns to where it was")
    mode.add_argument("--export", action="store_true",
                      help="write the commits above `base` in the build tree back to patches/ (canonical form)")
    mode.add_argument("--check", action="store_true",
                      help="CI: lint, apply exactly to the pinned base, re-export without difference, overlay")
    p.add_argument("--base", default="", metavar="SPEC",
                   help="pypi:X.Y.Z | nightly | vX.Y.Z (tag) | SHA | git:REF | path:DIR (default: the pin in VERSION)")
    p.add_argument("--remote", help=f"git remote for nightly/tags/shas (default ${sources.REMOTE_ENV} or "
                                    f"{sources.UPSTREAM_REMOTE})")
    p.add_argument("--out", type=Path, default=None, help="the build tree (default build/vllm)")
    p.add_argument("--report", type=Path, default=None,
                   help="where the JSON report goes (default: next to the tree, <out>-report.json)")
    p.add_argument("--3way", dest="three_way", action="store_true",
                   help="let a patch that does not apply exactly fall back to a 3-way merge (reported per patch)")
    p.add_argument("--full", action="store_true",
                   help="replay every patch, even those whose unchanged commits the tree already holds")
    p.add_argument("--force", action="store_true",
                   help="rebuild a tree holding work the tool did not make, after saving it under a recovery ref")
    p.add_argument("--project", type=Path, default=PROJECT_ROOT, help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    project = apply.Project(args.project.resolve())
    out = (args.out or project.root / "build" / "vllm").absolute()
    report_path = (args.report or out.with_name(out.name + "-report.json")).absolute()
    try:
        if args.version:
            return _version(project)
        if args.abort or args.continue_ or args.export:
            if not (out / ".git").exists():
                raise ToolError(f"{out}: no build tree here")
            with lock.hold(out, "this build tree"):
                return _on_tree(args, project, out, report_path)
        # every input and output is checked before anything is downloaded, imported or built
        the_pin = pin.read_pin(project.version_file)
        if args.check:
            from . import check
            return check.run(project, the_pin, args.remote)
        apply.load_series(project)
        overlay.read_manifest(project.overlay_dir)
        if args.status:
            if args.report:
                apply.check_outputs(project, None, args.report.absolute())
            from . import status
            with lock.hold(sources.cache_dir(), "the bases cache", wait=True):
                base = sources.resolve(args.base, the_pin, args.remote)
            rep = status.run(project, base, the_pin)
            return _finish(rep, args.report.absolute() if args.report else None)
        apply.check_outputs(project, out, report_path)
        with lock.hold(sources.cache_dir(), "the bases cache", wait=True):
            base = sources.resolve(args.base, the_pin, args.remote)
        with lock.hold(out, "this build tree"):
            rep = apply.build(project, base, out, report_path, args.three_way, args.force,
                              the_pin.overlay_version, full=args.full)
        return _finish(rep, report_path)
    except ToolError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    except OSError as e:  # the last resort: an unexpected file-system problem is one line, not a traceback
        print(f"error: {e.filename or ''}{': ' if e.filename else ''}{e.strerror or e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"\ninterrupted: {apply.after_interrupt(out)}", file=sys.stderr)
        return 130


def _version(project: apply.Project) -> int:
    the_pin = pin.read_pin(project.version_file)
    print(f"tools/apply.py {the_pin.overlay_version}: vLLM {the_pin.vllm} "
          f"(upstream commit {the_pin.commit}, sdist sha256 {the_pin.sdist_sha256[:16]}...) "
          f"+ {project.patches_dir.relative_to(project.root)}/series + overlay/")
    return 0


def _on_tree(args, project: apply.Project, out: Path, report_path: Path) -> int:
    """--abort, --continue, --export: commands on an existing build tree, under its lock."""
    if args.abort:
        print(f"aborted: {apply.abort(project, out)}")
        return 0
    if args.continue_:
        rep = apply.continue_(project, out)
        return _finish(rep, report_path)
    from . import export
    written = export.export_tree(project, out)
    print(f"exported {len(written)} patches to {project.patches_dir}")
    return 0


def _finish(rep: dict, report_path: Path | None) -> int:
    report.table(rep)
    if report_path is not None:
        if rep.get("mode") == "status":
            report.write(rep, report_path)
        print(f"report   {report_path}")
    if rep.get("next"):
        print(f"next     {rep['next']}", file=sys.stderr)
    return 0 if rep["result"] == "clean" else 1
