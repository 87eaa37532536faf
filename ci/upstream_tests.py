#!/usr/bin/env python3
"""Which upstream vLLM test files tier 2 runs on CPU, derived from what the patches touch.

    python ci/upstream_tests.py [build/vllm]            # the selection, one test id per line
    python ci/upstream_tests.py --explain               # why each file is in or out
    python ci/upstream_tests.py --strict                # fail if a touched module has tests
                                                        #   that ci/upstream-tests.toml does not classify

Touched = Python files under vllm/ that the tree's commits above tag `base` change (patches and
overlay). A test file is a candidate when it imports a touched module (`import vllm.a.b`,
`from vllm.a.b import x`, `from vllm.a import b`). ci/upstream-tests.toml classifies test files:
[[cpu]] runs here (optionally only some test ids), [[not-cpu]] never runs here (with a reason),
always = true runs whatever the patches touch; `broad` lists modules nearly every test imports
(vllm/envs.py), from which no candidates are derived. Candidates in neither list are reported as
unclassified: add them to one list.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "ci" / "upstream-tests.toml"
DEFAULT_TREE = ROOT / "build" / "vllm"


@dataclass
class Selection:
    run: list[str] = field(default_factory=list)  # pytest ids, relative to the tree
    why: dict[str, str] = field(default_factory=dict)
    not_cpu: dict[str, str] = field(default_factory=dict)
    unclassified: dict[str, list[str]] = field(default_factory=dict)
    touched: list[str] = field(default_factory=list)
    broad: list[str] = field(default_factory=list)  # touched, but imported nearly everywhere


def touched_modules(tree: Path) -> list[str]:
    p = subprocess.run(["git", "-C", str(tree), "diff", "--name-only", "base", "HEAD", "--", "vllm/"],
                       capture_output=True, text=True)
    if p.returncode:
        raise SystemExit(f"error: {tree}: cannot list the files changed above tag `base`: {p.stderr.strip()}")
    return sorted(n for n in p.stdout.split() if n.endswith(".py"))


def module_name(path: str) -> str:
    return path[:-3].replace("/", ".").removesuffix(".__init__")


def imports_module(text: str, module: str) -> bool:
    """Does a test file's source import ``module`` (directly, or as a name from its package)?"""
    if re.search(rf"(?<![\w.]){re.escape(module)}(?![\w])", text):
        return True
    parent, _, leaf = module.rpartition(".")
    if not parent:
        return False
    for m in re.finditer(rf"from\s+{re.escape(parent)}\s+import\s+(\([^)]*\)|[^\n]*)", text):
        if re.search(rf"(?<![\w.]){re.escape(leaf)}(?![\w])", m.group(1)):
            return True
    return False


def load_config(path: Path = CONFIG) -> dict:
    data = tomllib.loads(path.read_text())
    for entry in data.get("cpu", []) + data.get("not-cpu", []):
        if "path" not in entry:
            raise SystemExit(f"error: {path}: an entry without path: {entry}")
    return data


def select(tree: Path, config: dict, touched: list[str] | None = None) -> Selection:
    sel = Selection(touched=touched_modules(tree) if touched is None else touched)
    cpu = {e["path"]: e for e in config.get("cpu", [])}
    not_cpu = {e["path"]: e.get("reason", "") for e in config.get("not-cpu", [])}
    broad = set(config.get("broad", []))
    sel.broad = sorted(t for t in sel.touched if t in broad)
    modules = {module_name(t): t for t in sel.touched if t not in broad}
    candidates: dict[str, list[str]] = {}
    if modules:
        for test in sorted((tree / "tests").rglob("test_*.py")):
            rel = test.relative_to(tree).as_posix()
            text = test.read_text(errors="replace")
            hits = [m for m in modules if imports_module(text, m)]
            if hits:
                candidates[rel] = hits
    for path, entry in cpu.items():
        if not (tree / path).exists():
            print(f"warning: {CONFIG.name}: {path} is not in the tree", file=sys.stderr)
            continue
        if entry.get("always") or path in candidates:
            ids = entry.get("tests") or [path]
            sel.run += ids + [f"--deselect={d}" for d in entry.get("deselect", [])]
            sel.why[path] = ("always" if entry.get("always") else "imports " + ", ".join(candidates[path]))
    for path, hits in candidates.items():
        if path in not_cpu:
            sel.not_cpu[path] = not_cpu[path]
        elif path not in cpu:
            sel.unclassified[path] = hits
    return sel


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="ci/upstream_tests.py", description=__doc__.split("\n\n")[0])
    p.add_argument("tree", nargs="?", type=Path, default=DEFAULT_TREE)
    p.add_argument("--explain", action="store_true")
    p.add_argument("--strict", action="store_true")
    p.add_argument("--config", type=Path, default=CONFIG)
    args = p.parse_args(argv)
    sel = select(args.tree, load_config(args.config))
    if args.explain:
        print(f"touched: {len(sel.touched)} Python files under vllm/")
        for path in sel.broad:
            print(f"  broad     {path}  (imported almost everywhere: no candidates derived from it)")
        for path, why in sel.why.items():
            print(f"  run       {path}  ({why})")
        for path, why in sel.not_cpu.items():
            print(f"  not-cpu   {path}  ({why})")
        for path, hits in sel.unclassified.items():
            print(f"  UNCLASSIFIED {path}  (imports {', '.join(hits)})")
    else:
        print("\n".join(sel.run))
    if sel.unclassified:
        print(f"{'error' if args.strict else 'warning'}: {len(sel.unclassified)} upstream test files import "
              f"patched modules but are not classified in {args.config.relative_to(ROOT)}: "
              + ", ".join(sel.unclassified), file=sys.stderr)
        if args.strict:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
