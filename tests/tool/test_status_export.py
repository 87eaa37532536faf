"""--status against a moved upstream, --export canonical form, --check."""

from __future__ import annotations

import json

from tests.tool.repos import SAMPLER, TRAILERS, edited, git


def test_status_reports_every_class_with_decisions(project, upstream, tmp_path, capsys):
    cfg = "A = 1\nB = 2\nC = 3\n"
    with_gone = upstream.commit({"vllm/gone.py": "bye\n"}, "add gone.py")
    project.add(upstream, "0001-clean.patch", {"README.md": "ours\n"}, "[Misc] clean")
    project.add(upstream, "0002-merged.patch", {"vllm/config.py": edited(cfg, "B = 2", "B = 20")},
                "[Core] merged upstream", trailers=TRAILERS.replace("Upstream-Status: Pending",
                                                                    "Upstream-Status: Submitted [vllm#1]")
                .replace("Upstream-PR: none", "Upstream-PR: #1"))
    both = edited(edited(SAMPLER, "line 3\n", "line three\n"), "line 30\n", "line thirty\n")
    project.add(upstream, "0003-partly.patch", {"vllm/sampler.py": both}, "[Sampler] two hunks",
                group="block-verification")
    project.add(upstream, "0004-moved.patch", {"vllm/gone.py": "bye, ours\n"}, "[Misc] edit a file",
                group="sm120", on=with_gone)
    project.add(upstream, "0005-conflict.patch", {"vllm/__init__.py": "X = 1\n"}, "[Misc] init", group="tilelang")
    project.add(upstream, "0006-threeway.patch", {"vllm/sampler.py": edited(SAMPLER, "line 18\n", "line 18 ours\n")},
                "[Misc] 3way", group="tilelang")
    # the new upstream: merged 0002, half of 0003, removed 0004's target, changed 0005's and 0006's context
    new = upstream.commit({
        "vllm/config.py": edited(cfg, "B = 2", "B = 20"),
        "vllm/sampler.py": edited(edited(SAMPLER, "line 3\n", "line three\n"), "line 21\n", "line 21 upstream\n"),
        "vllm/gone.py": None,
        "vllm/__init__.py": "Y = 2\n",
    })
    report = tmp_path / "status.json"
    out = tmp_path / "build"
    assert project.run("--base", f"path:{upstream.path}", "--status", "--report", str(report),
                       "--out", str(out)) == 1
    assert not out.exists()  # the build tree is not touched
    rep = json.loads(report.read_text())
    assert rep["base"]["commit"] == new and rep["mode"] == "status"
    by = {p["file"].split("/")[1][:4]: p for p in rep["patches"]}
    assert by["0001"]["status"] == "applied" and by["0001"]["decision"] == "keep"
    assert by["0002"]["status"] == "already-upstream"
    # the upstream commit found by pickaxe in the base's history, the PR from the patch header
    assert "UPSTREAMED.toml" in by["0002"]["decision"]
    assert f'upstream = "{new[:12]} (#1)"' in by["0002"]["decision"]
    assert by["0003"]["status"] == "partly-upstream"
    assert len(by["0003"]["hunks_upstream"]) == 1 and len(by["0003"]["hunks_missing"]) == 1
    assert by["0004"]["status"] == "target-missing" and by["0004"]["missing_files"] == ["vllm/gone.py"]
    assert by["0005"]["status"] == "conflict" and by["0005"]["files"] == ["vllm/__init__.py"]
    assert "found 'Y = 2'" in by["0005"]["hunks"][0]["mismatch"]
    assert by["0006"]["status"] == "applied-3way"
    assert rep["summary"]["conflict"] == 1 and rep["result"] == "changes-needed"
    assert by["0002"]["upstream_status"] == "Submitted [vllm#1]"  # joined with the metadata
    printed = capsys.readouterr().out
    assert "already-upstream" in printed and "[[upstreamed]]" in printed


def test_status_on_the_base_it_was_made_for_is_clean(project, upstream, tmp_path):
    project.add(upstream, "0001-a.patch", {"README.md": "ours\n"}, "[Misc] a")
    assert project.run("--base", f"path:{upstream.path}", "--status", "--report", str(tmp_path / "s.json")) == 0
    assert json.loads((tmp_path / "s.json").read_text())["result"] == "clean"


def test_reexport_of_an_unchanged_stack_changes_no_byte(project, upstream, tmp_path):
    project.add(upstream, "0001-a.patch", {"README.md": "ours\n"}, "[Misc] a")
    project.add(upstream, "0002-b.patch", {"vllm/config.py": "A = 2\n"}, "[Misc] b", group="sm120")
    out = tmp_path / "vllm"
    assert project.run("--base", f"path:{upstream.path}", "--out", str(out)) == 0
    patches = project.path / "patches"
    before = {p: p.read_bytes() for p in patches.rglob("*") if p.is_file()}
    assert project.run("--export", "--out", str(out)) == 0
    after = {p: p.read_bytes() for p in patches.rglob("*") if p.is_file()}
    assert after == before
    # apply again from the export and export again: still identical (a fixed point)
    assert project.run("--base", f"path:{upstream.path}", "--out", str(tmp_path / "v2")) == 0
    assert project.run("--export", "--out", str(tmp_path / "v2")) == 0
    assert {p: p.read_bytes() for p in patches.rglob("*") if p.is_file()} == before


def test_export_picks_up_an_amended_commit_and_a_new_one(project, upstream, tmp_path):
    project.add(upstream, "0001-a.patch", {"README.md": "ours\n"}, "[Misc] a")
    out = tmp_path / "vllm"
    assert project.run("--base", f"path:{upstream.path}", "--out", str(out)) == 0
    (out / "vllm" / "config.py").write_text("A = 5\n")
    git(out, "commit", "-qam", f"[Sampler] five\n\nWhy.\n\n{TRAILERS}")
    assert project.run("--export", "--out", str(out)) == 0
    series = (project.path / "patches" / "series").read_text()
    assert "dspark/0001-a.patch\ndspark/0002-five.patch\n" in series
    mail = (project.path / "patches" / "dspark" / "0002-five.patch").read_text()
    assert mail.startswith("From 0000000000000000000000000000000000000000 ")
    assert "Subject: [Sampler] five" in mail and "Drop-When: upstream does it" in mail
    assert "\nindex " in mail and len(mail.split("\nindex ")[1].split("..")[0]) == 40  # full index
    assert project.run("--base", f"path:{upstream.path}", "--out", str(tmp_path / "v2")) == 0
    assert (tmp_path / "v2" / "vllm" / "config.py").read_text() == "A = 5\n"


def test_export_refuses_a_commit_without_metadata(project, upstream, tmp_path, capsys):
    project.add(upstream, "0001-a.patch", {"README.md": "ours\n"}, "[Misc] a")
    out = tmp_path / "vllm"
    assert project.run("--base", f"path:{upstream.path}", "--out", str(out)) == 0
    (out / "vllm" / "config.py").write_text("A = 5\n")
    git(out, "commit", "-qam", "quick fix")
    series_before = (project.path / "patches" / "series").read_text()
    assert project.run("--export", "--out", str(out)) == 2
    err = capsys.readouterr().err
    assert "'quick fix'" in err and "missing Upstream-Status:" in err
    assert (project.path / "patches" / "series").read_text() == series_before


def test_check_passes_on_a_canonical_stack_and_fails_on_churn(project, upstream, tmp_path, monkeypatch, capsys):
    from patchstack import sources

    project.add(upstream, "0001-a.patch", {"README.md": "ours\n"}, "[Misc] a")
    # --check uses the pinned base; point the pin at the tiny upstream through a path base
    real = sources.resolve
    monkeypatch.setattr(sources, "resolve", lambda spec, pin, remote=None: real(f"path:{upstream.path}", pin))
    assert project.run("--check") == 0
    p = project.path / "patches" / "dspark" / "0001-a.patch"
    p.write_text(p.read_text().replace("Date: ", "X-Mailer: churn\nDate: "))
    assert project.run("--check") == 1
    assert "0001-a.patch: re-export differs" in capsys.readouterr().err


def test_export_keeps_a_trailing_blank_context_line(project, upstream, tmp_path):
    upstream.v1 = upstream.commit({"vllm/blank.py": "x = 1\n\n"}, "a file ending in a blank line")
    project.add(upstream, "0001-a.patch", {"vllm/blank.py": "x = 2\n\n"}, "[Misc] a")
    mail = (project.path / "patches" / "dspark" / "0001-a.patch").read_text()
    assert mail.endswith("+x = 2\n \n")  # the last line of the diff is a context line holding one space
    out = tmp_path / "vllm"
    assert project.run("--base", f"path:{upstream.path}", "--out", str(out)) == 0
    assert project.run("--export", "--out", str(out)) == 0
    assert (project.path / "patches" / "dspark" / "0001-a.patch").read_text() == mail
