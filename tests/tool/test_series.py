"""Series file and patch metadata lint."""

from __future__ import annotations

import pytest
from patchstack.series import metadata_problems, read_series

from tests.tool.repos import TRAILERS

GOOD = {"Upstream-Status": "Pending", "Upstream-PR": "none", "Drop-When": "x", "Reason": "y"}


@pytest.mark.parametrize("change, problem", [
    ({"Drop-When": None}, "missing Drop-When:"),
    ({"Reason": None}, "missing Reason:"),
    ({"Upstream-Status": "Merged"}, "is not one of"),
    ({"Upstream-Status": "Submitted"}, "Submitted needs [where]"),
    ({"Upstream-Status": "Submitted [ ]"}, "Submitted needs [where]"),
    ({"Upstream-Status": "Backport"}, "Backport needs [version]"),
    ({"Upstream-Status": "Inappropriate"}, "Inappropriate needs [reason]"),
    ({"Upstream-Status": "Backport [0.35.0]", "Upstream-PR": "none"}, "needs the upstream PR or commit"),
    ({"Upstream-PR": "see slack"}, "is not a PR URL"),
])
def test_metadata_rules(change, problem):
    meta = {k: v for k, v in {**GOOD, **change}.items() if v is not None}
    assert any(problem in p for p in metadata_problems(meta)), metadata_problems(meta)


@pytest.mark.parametrize("status", ["Pending", "Denied", "Submitted [vllm-project/vllm#50123]",
                                    "Backport [0.35.0]", "Inappropriate [SM120 only, not for upstream]"])
def test_valid_statuses(status):
    pr = "#50123" if status.startswith(("Submitted", "Backport")) else "none"
    assert metadata_problems({**GOOD, "Upstream-Status": status, "Upstream-PR": pr}) == []


def test_series_lint_missing_unlisted_duplicate_malformed(project, upstream):
    project.add(upstream, "0001-a.patch", {"README.md": "a\n"}, "a")
    project.add(upstream, "0002-b.patch", {"README.md": "b\n"}, "b",
                trailers=TRAILERS.replace("Drop-When: upstream does it\n", ""))
    patches = project.path / "patches"
    (patches / "dspark" / "0003-unlisted.patch").write_text((patches / "dspark" / "0001-a.patch").read_text())
    (patches / "dspark" / "0004-junk.patch").write_text("this is not a mail\n")
    project.series["dspark"] += ["dspark/0001-a.patch", "dspark/0009-gone.patch", "dspark/0004-junk.patch"]
    project.write_series()
    s = read_series(patches)
    text = "\n".join(s.problems)
    assert "dspark/0001-a.patch listed twice" in text
    assert "dspark/0009-gone.patch is listed but the file is missing" in text
    assert "0003-unlisted.patch: not listed" in text
    assert "0004-junk.patch: not a git format-patch mail" in text
    assert "0002-b.patch: missing Drop-When:" in text
    assert [p.name for p in s.patches] == ["dspark/0001-a.patch", "dspark/0002-b.patch"]
    assert s.patches[0].group == "dspark" and s.patches[0].meta["Upstream-Status"] == "Pending"


def test_invalid_series_refuses_before_touching_the_tree(project, upstream, tmp_path, capsys):
    project.series["dspark"].append("dspark/0001-missing.patch")
    project.write_series()
    out = tmp_path / "vllm"
    assert project.run("--base", f"path:{upstream.path}", "--out", str(out)) == 2
    assert "0001-missing.patch is listed but the file is missing" in capsys.readouterr().err
    assert not out.exists()


def test_malformed_diff_is_reported_as_an_error_naming_the_patch(project, upstream, tmp_path):
    import json

    p = project.add(upstream, "0001-a.patch", {"README.md": "a\n"}, "a")
    text = p.read_text()
    p.write_text(text.replace("@@ -1 +1 @@", "@@ -1 +1 @@\n garbage line not in the file"))
    out = tmp_path / "vllm"
    assert project.run("--base", f"path:{upstream.path}", "--out", str(out)) == 1
    r = json.loads((tmp_path / "vllm-report.json").read_text())["patches"][0]
    assert r["file"] == "dspark/0001-a.patch" and r["status"] in ("conflict", "error")
    assert r["details"]
