"""--status recognises changes upstream merged with context drift (issue 12): content match,
whitespace-only drift, generic hunks that must not match, 3-way no-ops and partial 3-way
results, and the upstream commit named from a git base's history."""

from __future__ import annotations

import json

import pytest
from patchstack import git as pgit
from patchstack import hunks, provenance
from patchstack.sources import Base, bases_repo

from tests.tool.repos import git

MODULE = '''"""A module."""

import math


def alpha(x):
    y = x + 1
    return y


def beta(values):
    total = 0
    for v in values:
        total += v
    return total


def gamma(a, b):
    return a * b


def delta(items):
    seen = set()
    for item in items:
        seen.add(item)
    return sorted(seen)
'''
PATH = "vllm/module.py"


def sub(text: str, *pairs: tuple[str, str]) -> str:
    for old, new in pairs:
        assert old in text, old
        text = text.replace(old, new, 1)
    return text


@pytest.fixture
def up(upstream):
    upstream.commit({PATH: MODULE}, "add module")
    upstream.v1 = git(upstream.path, "rev-parse", "HEAD")
    return upstream


def status(project, up, tmp_path) -> dict:
    report = tmp_path / "status.json"
    project.run("--base", f"path:{up.path}", "--status", "--report", str(report))
    return json.loads(report.read_text())["patches"][0]


OURS = ("    y = x + 1\n", "    y = scale_input(x, factor=2)\n")
GENERIC = ("    return total\n", "    return\n")
GENERIC_DRIFT = (("    for v in values:\n", "    for v in list(values):\n"),
                 ("def gamma(a, b):\n", "def gamma(a, b):  # the product\n"))
OURS_B = ("    return sorted(seen)\n", "    return sorted(seen, key=str)\n")
OURS_B_DRIFT = ("    seen = set()\n", "    seen: set = set()\n")


def test_drifted_context_on_both_sides_is_already_upstream(project, up, tmp_path):
    project.add(up, "0001-scale.patch", {PATH: sub(MODULE, OURS)}, "[Core] scale the input")
    # upstream merged the same line, and changed the lines around it and dropped a blank line
    up.commit({PATH: sub(MODULE, OURS, ("def alpha(x):\n", "def alpha(x: int) -> int:\n"),
                         ("    return y\n\n\n", "    return int(y)\n\n"))})
    r = status(project, up, tmp_path)
    assert r["status"] == "already-upstream", r
    assert r["how"] == "per hunk: content match"
    assert "drifted" in r["hunks_upstream"][0]["how"]
    assert "drop" in r["decision"] and "[[upstreamed]]" in r["decision"]


def test_whitespace_only_drift_is_already_upstream(project, up, tmp_path):
    project.add(up, "0001-scale.patch", {PATH: sub(MODULE, OURS)}, "[Core] scale the input")
    up.commit({PATH: sub(MODULE, ("    y = x + 1\n", "    y = scale_input(x,  factor=2)   \n"),
                         ("def alpha(x):\n", "def alpha(x):  # documented\n"))})
    r = status(project, up, tmp_path)
    assert r["status"] == "already-upstream", r
    assert r["how"] == "per hunk: content match"


def test_indentation_is_not_whitespace_drift(project, up, tmp_path):
    project.add(up, "0001-scale.patch", {PATH: sub(MODULE, OURS)}, "[Core] scale the input")
    up.commit({PATH: sub(MODULE, ("    y = x + 1\n", "    if x:\n        y = scale_input(x, factor=2)\n"),
                         ("def alpha(x):\n", "def alpha(x: int):\n"))})
    assert status(project, up, tmp_path)["status"] != "already-upstream"


def test_a_generic_hunk_does_not_match_by_accident(project, up, tmp_path):
    # ours adds a lone `return` to delta; upstream has `return` lines elsewhere and moved delta's context
    project.add(up, "0001-early.patch", {PATH: sub(MODULE, ("        seen.add(item)\n",
                                                            "        seen.add(item)\n        return\n"))},
                "[Misc] return early")
    up.commit({PATH: sub(MODULE, ("    seen = set()\n", "    seen: set = set()\n"),
                         ("    return sorted(seen)\n", "    return\n    return sorted(seen)\n"))})
    r = status(project, up, tmp_path)
    assert r["status"] not in ("already-upstream", "partly-upstream"), r


def test_our_variant_of_an_upstream_change_stays_ours(project, up, tmp_path):
    project.add(up, "0001-scale.patch", {PATH: sub(MODULE, ("    y = x + 1\n", "    y = scale_input(x, factor=3)\n"))},
                "[Core] scale the input")
    up.commit({PATH: sub(MODULE, OURS, ("def alpha(x):\n", "def alpha(x: int):\n"))})
    assert status(project, up, tmp_path)["status"] not in ("already-upstream", "partly-upstream")


def test_a_3way_merge_that_changes_nothing_is_already_upstream(project, up, tmp_path):
    # a generic change (content cannot vouch for it) that upstream made too, with its context moved
    # (two lines away on each side: git merges changes that are not adjacent)
    project.add(up, "0001-generic.patch", {PATH: sub(MODULE, GENERIC)}, "[Misc] generic")
    new = up.commit({PATH: sub(MODULE, GENERIC, *GENERIC_DRIFT)})
    report = tmp_path / "status.json"
    project.run("--base", f"path:{up.path}", "--status", "--report", str(report))
    rep = json.loads(report.read_text())
    r = rep["patches"][0]
    assert r["status"] == "already-upstream" and r["how"] == "3-way no-op", r
    assert rep["base"]["commit"] == new


def test_partial_with_the_rest_needing_3way(project, up, tmp_path):
    project.add(up, "0001-two.patch", {PATH: sub(MODULE, OURS, OURS_B)}, "[Core] two hunks")
    # upstream merged the first hunk with drift, and changed delta's context (ours needs 3-way there)
    up.commit({PATH: sub(MODULE, OURS, ("def alpha(x):\n", "def alpha(x: int):\n"), OURS_B_DRIFT)})
    r = status(project, up, tmp_path)
    assert r["status"] == "partly-upstream", r
    assert r["three_way"] is True
    assert [h["how"].split(" at ")[0] for h in r["hunks_upstream"]] == ["content match"]
    assert len(r["hunks_missing"]) == 1 and "delta" in r["hunks_missing"][0]


def test_a_3way_merge_that_drops_a_hunk_is_partly_upstream(project, up, tmp_path):
    project.add(up, "0001-two.patch", {PATH: sub(MODULE, GENERIC, OURS_B)}, "[Core] two hunks")
    up.commit({PATH: sub(MODULE, GENERIC, *GENERIC_DRIFT, OURS_B_DRIFT)})
    r = status(project, up, tmp_path)
    assert r["status"] == "partly-upstream" and r["how"] == "3-way dropped hunks", r
    assert [h["how"] for h in r["hunks_upstream"]] == ["3-way dropped it"]
    assert "beta" in r["hunks_upstream"][0]["hunk"]


def test_git_base_names_the_upstream_commit_and_pr(project, up, tmp_path):
    """A git base fetched shallow: the history is deepened back to the pinned commit, and the
    pickaxe finds the commit that merged our change; its subject names the PR."""
    project.add(up, "0001-scale.patch", {PATH: sub(MODULE, OURS)}, "[Core] scale the input")
    # pin the project on v1, as VERSION pins the upstream commit the series was written on
    version = project.path / "VERSION"
    version.write_text(version.read_text().replace('commit = "62d4bc3c7"', f'commit = "{up.v1[:9]}"'))
    merged = up.commit({PATH: sub(MODULE, OURS, ("def alpha(x):\n", "def alpha(x: int):\n"))},
                       "[Core] Scale DSpark draft inputs (#45678)")
    up.commit({"README.md": "later\n"}, "[Doc] unrelated (#45679)")
    git(up.path, "tag", "v9.9.9")
    bare = tmp_path / "remote.git"
    git(tmp_path, "clone", "-q", "--bare", str(up.path), str(bare))
    report = tmp_path / "status.json"
    project.run("--base", "v9.9.9", "--remote", bare.as_uri(), "--status", "--report", str(report))
    r = json.loads(report.read_text())["patches"][0]
    assert r["status"] == "already-upstream", r
    change = r["upstream_change"][0]
    assert change["commit"] == merged and change["pr"] == "#45678", change
    assert "deepened" in change["history"]
    assert f'upstream = "{merged[:12]} (#45678)"' in r["decision"]


def test_pypi_base_names_the_first_release_checked_against_the_older_base(up, tmp_path):
    """Without history, the release is named, after checking that the older base lacks it."""
    repo = bases_repo()
    older = up.v1
    newer = up.commit({PATH: sub(MODULE, OURS)})
    pgit.run(repo, "fetch", "-q", str(up.path), f"{newer}:refs/t/newer")
    diff = git(up.path, "diff", older, newer, strip=False)
    f = hunks.parse(diff)[0]
    base = Base(spec="pypi:9.9.9", kind="pypi", commit=newer, version="9.9.9")
    got = provenance.first_release(repo, base, older, "pypi:9.9.8", f.path, f.hunks[0])
    assert got == {"first_release": "9.9.9", "checked": "not in pypi:9.9.8, in 9.9.9"}
    # had the older base the change already, the release is not guessed
    got = provenance.first_release(repo, base, newer, "pypi:9.9.8", f.path, f.hunks[0])
    assert got["first_release"] == "<= pypi:9.9.8"


def test_a_file_upstream_renamed_is_followed(project, up, tmp_path):
    """git's rename detection between the pinned commit and the base finds the file's new place."""
    project.add(up, "0001-scale.patch", {PATH: sub(MODULE, OURS)}, "[Core] scale the input")
    version = project.path / "VERSION"
    version.write_text(version.read_text().replace('commit = "62d4bc3c7"', f'commit = "{up.v1[:9]}"'))
    up.commit({PATH: None, "vllm/renamed.py": sub(MODULE, OURS, ("def alpha(x):\n", "def alpha(x: int):\n"))},
              "[Refactor] rename module (#777)")
    r = status(project, up, tmp_path)
    assert r["status"] == "already-upstream", r
    assert "vllm/renamed.py (renamed)" in r["hunks_upstream"][0]["how"]
    # not merged, only moved: target-missing names the new place
    project2_patch = project.path / "patches" / "dspark" / "0001-scale.patch"
    text = project2_patch.read_text().replace("scale_input(x, factor=2)", "scale_input(x, factor=5)")
    project2_patch.write_text(text)
    r = status(project, up, tmp_path)
    assert r["status"] == "target-missing" and "renamed upstream to vllm/renamed.py" in r["missing_files"][0]


# --- the same rules in the build tree: apply --3way and --export --------------------------------

def test_apply_3way_stops_carrying_a_patch_upstream_has_and_export_drops_it(project, up, tmp_path, capsys):
    project.add(up, "0001-generic.patch", {PATH: sub(MODULE, GENERIC)}, "[Misc] generic")
    project.add(up, "0002-readme.patch", {"README.md": "ours\n"}, "[Doc] ours")
    up.commit({PATH: sub(MODULE, GENERIC, *GENERIC_DRIFT)}, "[Misc] upstream did it (#4242)")
    out = tmp_path / "vllm"
    assert project.run("--base", f"path:{up.path}", "--out", str(out), "--3way") == 0
    rep = json.loads((tmp_path / "vllm-report.json").read_text())
    first, second = rep["patches"]
    assert first["status"] == "already-upstream" and first["how"] == "3-way no-op" and first["commit"] is None
    assert "[[upstreamed]]" in first["decision"] and "(#4242)" in first["decision"]
    assert second["status"] == "applied" and second["commit"]
    assert git(out, "log", "--format=%s", "base..HEAD").splitlines() == ["[Doc] ours"]  # no empty commit
    printed = capsys.readouterr().out
    assert "already-upstream" in printed and "[[upstreamed]]" in printed
    # a second run over the same tree keeps working (the dropped patch has no commit to match)
    assert project.run("--base", f"path:{up.path}", "--out", str(out), "--3way") == 0
    assert project.run("--out", str(out), "--export") == 0
    err = capsys.readouterr().err
    assert "dropped dspark/0001-generic.patch: upstream has it" in err and "[[upstreamed]]" in err
    assert not (project.path / "patches" / "dspark" / "0001-generic.patch").exists()
    series = (project.path / "patches" / "series").read_text()
    assert "0001-generic" not in series and "dspark/0002-readme.patch" in series


def test_apply_3way_partial_and_export_writes_only_what_is_ours(project, up, tmp_path, capsys):
    project.add(up, "0001-two.patch", {PATH: sub(MODULE, GENERIC, OURS_B)}, "[Core] two hunks")
    up.commit({PATH: sub(MODULE, GENERIC, *GENERIC_DRIFT, OURS_B_DRIFT)})
    out = tmp_path / "vllm"
    assert project.run("--base", f"path:{up.path}", "--out", str(out), "--3way") == 0
    r = json.loads((tmp_path / "vllm-report.json").read_text())["patches"][0]
    assert r["status"] == "partly-upstream" and r["how"] == "3-way dropped hunks", r
    assert "[[upstreamed]]" in r["decision"]
    assert project.run("--out", str(out), "--export") == 0
    assert "upstream has part of it" in capsys.readouterr().err
    text = (project.path / "patches" / "dspark" / "0001-two.patch").read_text()
    assert "+    return sorted(seen, key=str)" in text and "-    return total" not in text


def test_export_never_writes_an_empty_patch(project, up, tmp_path, capsys):
    project.add(up, "0001-readme.patch", {"README.md": "ours\n"}, "[Doc] ours")
    out = tmp_path / "vllm"
    assert project.run("--base", f"path:{up.path}", "--out", str(out)) == 0
    git(out, "commit", "-q", "--allow-empty", "-m",
        "[Misc] nothing\n\nUpstream-Status: Pending\nUpstream-PR: none\nDrop-When: x\nReason: y\n")
    assert project.run("--out", str(out), "--export") == 0
    assert "an empty commit" in capsys.readouterr().err
    assert sorted(p.name for p in (project.path / "patches" / "dspark").iterdir()) == ["0001-readme.patch"]
