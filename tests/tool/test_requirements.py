"""ci/build.sh, and each stage of ci/test.sh, installs requirement files and then runs Python
scripts with them: every module those scripts import (at any depth, lazy imports inside functions
included) must come from the standard library, from this project, or from a distribution those
files declare. A fresh machine failed exactly here once (ci/install.py needed `packaging`,
declared nowhere)."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
# where the scripts find their own modules: the script's directory, plus tools/ (ci/common.py
# puts it on sys.path for patchstack)
SEARCH = [ROOT / "tools", ROOT / "ci"]


def build_sh_plan() -> tuple[Path, list[Path]]:
    """The requirements file ci/build.sh installs and the scripts it then runs."""
    text = (ROOT / "ci" / "build.sh").read_text()
    reqs = re.findall(r"pip install[^\n]*-r (\S+)", text)
    scripts = re.findall(r'"\$VENV/bin/python" (\S+\.py)', text)
    assert len(reqs) == 1 and scripts, "ci/build.sh: expected one `pip install -r FILE` and python scripts"
    return ROOT / reqs[0], [ROOT / s for s in scripts]


def declared(req_file: Path) -> set[str]:
    names = set()
    for line in req_file.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("-r "):
            names |= declared((req_file.parent / line[3:].strip()).resolve())
        else:
            names.add(canonicalize_name(Requirement(line).name))
    return names


def _local_module(name: str, roots: list[Path]) -> Path | None:
    parts = name.split(".")
    for root in roots:
        for cand in (root.joinpath(*parts).with_suffix(".py"), root.joinpath(*parts, "__init__.py")):
            if cand.exists():
                return cand
    return None


def third_party_imports(scripts: list[Path]) -> dict[str, str]:
    """Top-level third-party module -> the first project file that imports it."""
    seen: set[Path] = set()
    found: dict[str, str] = {}
    todo = list(scripts)
    # absolute imports search sys.path: the scripts' own directories, then SEARCH
    roots = list(dict.fromkeys([s.parent for s in scripts] + SEARCH))
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        pkg_dir = path.parent
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = pkg_dir
                for _ in range(node.level - 1):
                    base = base.parent
                mods = [f"{node.module}" if node.module else ""]
                targets = [base.joinpath(*m.split(".")) for m in mods if m] + [
                    base / a.name for a in node.names]
                for t in targets:
                    for cand in (t.with_suffix(".py"), t / "__init__.py"):
                        if cand.exists():
                            todo.append(cand)
                continue
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top in sys.stdlib_module_names or top == "__future__":
                    continue
                local = _local_module(name, roots) or _local_module(top, roots)
                if local is not None:
                    todo.append(local)
                    continue
                found.setdefault(top, str(path.relative_to(ROOT)))
    return found


def stage_plans() -> dict[str, tuple[list[Path], list[Path]]]:
    """Each stage of ci/test.sh -> (the requirement files it installs, the project scripts it runs)."""
    text = (ROOT / "ci" / "test.sh").read_text()

    def body(function: str) -> str:
        m = re.search(rf"^{function}\(\) {{\n(.*?)^}}", text, re.M | re.S)
        assert m, f"ci/test.sh has no function {function}()"
        return m.group(1)

    def requirement_files(line: str) -> list[Path]:
        return [ROOT / r for r in re.findall(r"-r (\S+)", line)]

    always = requirement_files(body("ensure_deps"))  # what every stage gets
    names = re.search(r"^\s*(\w+(?: \| \w+)+)\)", text, re.M).group(1).split(" | ")
    plans = {}
    for name in names:
        stage = body(name)
        first = stage.splitlines()[0].strip()
        # a stage that starts elsewhere would run its scripts on whatever an earlier stage installed
        assert first.startswith("ensure_deps"), f"ci/test.sh: stage {name} starts with {first!r}"
        reqs = always + requirement_files(first)
        scripts = re.findall(r'"\$PY" ((?:ci|tools)/\S+\.py)', stage)
        plans[name] = (reqs, [ROOT / s for s in scripts])
    return plans


def undeclared(req_files: list[Path], scripts: list[Path]) -> list[str]:
    have = set().union(*(declared(r) for r in req_files))
    dists = importlib.metadata.packages_distributions()
    missing = []
    for module, where in sorted(third_party_imports(scripts).items()):
        names = {canonicalize_name(d) for d in dists.get(module, [module])}
        if not names & have:
            missing.append(f"{module} (imported by {where}; distribution {', '.join(sorted(names))})")
    return missing


def test_build_sh_declares_what_its_scripts_import():
    req_file, scripts = build_sh_plan()
    assert {s.relative_to(ROOT).as_posix() for s in scripts} >= {"tools/apply.py", "ci/install.py"}
    missing = undeclared([req_file], scripts)
    assert not missing, f"{req_file.relative_to(ROOT)} lacks: " + "; ".join(missing)


def test_each_test_sh_stage_installs_what_its_scripts_import():
    """`bash ci/test.sh cpu` alone on a fresh venv once stopped at ci/install.py (`packaging`):
    only the lint and tool stages installed ci/requirements/install.txt, and the default order
    hid it. Every stage now installs what the scripts it runs import, before running them."""
    plans = stage_plans()
    assert {"lint", "tool", "cpu", "wheel", "precompiled"} <= set(plans)
    assert ROOT / "ci/install.py" in plans["cpu"][1] and ROOT / "ci/build_wheel.py" in plans["wheel"][1]
    for name, (reqs, scripts) in plans.items():
        missing = undeclared(reqs, scripts)
        assert not missing, f"ci/test.sh stage {name} installs {[r.name for r in reqs]}, lacking: " + "; ".join(
            missing)


def test_the_check_sees_lazy_imports(tmp_path, monkeypatch):
    """The walk follows the script into the modules it imports and finds an import inside a
    function (how ci/common.py imports packaging), so dropping a declaration fails the test above."""
    (tmp_path / "helper.py").write_text("import os\n\ndef f():\n    from packaging.version import Version\n")
    (tmp_path / "main.py").write_text("import json\nimport helper\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert third_party_imports([tmp_path / "main.py"]) == {"packaging": "helper.py"}


@pytest.mark.parametrize("script", ["tools/apply.py", "ci/install.py"])
def test_known_third_party_imports_are_found(script):
    found = third_party_imports([ROOT / script])
    assert {"git", "pypi_simple"} <= set(found)
    if script == "ci/install.py":
        assert "packaging" in found
