"""tools/apply.py on tiny upstream repositories: apply, conflicts, 3-way, safety, overlay."""

from __future__ import annotations

import json

from tests.tool.repos import SAMPLER, edited, git


def two_patches(project, upstream):
    project.add(upstream, "0001-config.patch", {"vllm/config.py": "A = 1\nB = 20\nC = 3\n"}, "[DSpark] B is 20")
    project.add(upstream, "0002-sampler.patch", {"vllm/sampler.py": edited(SAMPLER, "line 5\n", "line five\n")},
                "[Spec Decode] name line five", group="block-verification")


def test_clean_apply_commits_tag_report_and_reproducible_ids(project, upstream, tmp_path, capsys):
    two_patches(project, upstream)
    project.add_overlay("vllm/extra.py", "EXTRA = True\n")
    out = tmp_path / "build" / "vllm"
    assert project.run("--base", f"path:{upstream.path}", "--out", str(out)) == 0
    log = git(out, "log", "--format=%s", "base..HEAD").splitlines()
    assert log == ["overlay: 1 file(s) from overlay/", "[Spec Decode] name line five", "[DSpark] B is 20"]
    assert git(out, "rev-parse", "base") == upstream.v1
    assert (out / "vllm" / "extra.py").read_text() == "EXTRA = True\n"
    assert git(out, "status", "--porcelain") == ""
    rep = json.loads((tmp_path / "build" / "vllm-report.json").read_text())
    assert rep["base"]["commit"] == upstream.v1 and rep["base"]["spec"] == f"path:{upstream.path}"
    assert [p["status"] for p in rep["patches"]] == ["applied", "applied"]
    assert [p["file"] for p in rep["patches"]] == ["dspark/0001-config.patch", "block-verification/0002-sampler.patch"]
    assert all(len(p["commit"]) == 40 for p in rep["patches"])
    assert rep["patches"][0]["upstream_status"] == "Pending"
    assert rep["overlay"][0]["status"] == "applied" and rep["overlay"][0]["kind"] == "new"
    table = capsys.readouterr().out
    assert "dspark/0001-config.patch" in table and "result   clean" in table
    # same base + series -> same commit ids in another tree (fixed committer, mail dates)
    other = tmp_path / "other"
    assert project.run("--base", f"path:{upstream.path}", "--out", str(other)) == 0
    assert git(other, "rev-parse", "HEAD") == git(out, "rev-parse", "HEAD")
    # a warm rerun on the same tree is allowed (the tool made it) and lands on the same commit
    assert project.run("--base", f"path:{upstream.path}", "--out", str(out)) == 0
    assert git(out, "rev-parse", "HEAD") == git(other, "rev-parse", "HEAD")


def test_conflict_stops_in_git_am_with_files_and_hunks(project, upstream, tmp_path, capsys):
    two_patches(project, upstream)
    project.add(upstream, "0003-after.patch", {"README.md": "ours\n"}, "[Misc] after", group="sm120")
    upstream.commit({"vllm/sampler.py": edited(SAMPLER, "line 4\n", "line FOUR\n")})
    out = tmp_path / "vllm"
    assert project.run("--base", f"path:{upstream.path}", "--out", str(out)) == 1
    assert (out / ".git" / "rebase-apply").is_dir()  # git am's in-progress state
    rep = json.loads((tmp_path / "vllm-report.json").read_text())
    assert [p["status"] for p in rep["patches"]] == ["applied", "conflict", "not-applied"]
    bad = rep["patches"][1]
    assert bad["files"] == ["vllm/sampler.py"] and bad["commit"] is None
    assert bad["hunks"][0]["hunk"].startswith("@@ -2,7 +2,7 @@")
    assert "expected 'line 4', found 'line FOUR'" in bad["hunks"][0]["mismatch"]
    assert rep["result"] == "conflict" and "--continue" in rep["next"]
    printed = capsys.readouterr()
    assert "block-verification/0002-sampler.patch" in printed.out and "--abort" in printed.err


def test_3way_is_opt_in_and_reported_per_patch(project, upstream, tmp_path):
    two_patches(project, upstream)
    # upstream edits a line inside the patch's context: exact apply fails, a 3-way merge does not
    upstream.commit({"vllm/sampler.py": edited(SAMPLER, "line 7\n", "line 7 upstream\n")})
    out = tmp_path / "vllm"
    assert project.run("--base", f"path:{upstream.path}", "--out", str(out)) == 1
    assert project.run("--abort", "--out", str(out)) == 0
    out2 = tmp_path / "v2"
    assert project.run("--base", f"path:{upstream.path}", "--out", str(out2), "--3way") == 0
    rep = json.loads((tmp_path / "v2-report.json").read_text())
    assert [p["status"] for p in rep["patches"]] == ["applied", "applied-3way"]
    text = (out2 / "vllm" / "sampler.py").read_text()
    assert "line five\n" in text and "line 7 upstream\n" in text


def test_dirty_tree_is_refused_and_untouched(project, upstream, tmp_path, capsys):
    two_patches(project, upstream)
    out = tmp_path / "vllm"
    assert project.run("--base", f"path:{upstream.path}", "--out", str(out)) == 0
    (out / "vllm" / "config.py").write_text("my work\n")
    (out / "notes.txt").write_text("untracked work\n")
    head = git(out, "rev-parse", "HEAD")
    assert project.run("--base", f"path:{upstream.path}", "--out", str(out)) == 2
    err = capsys.readouterr().err
    assert "uncommitted or untracked paths" in err and "vllm/config.py" in err and "--force" in err
    assert (out / "vllm" / "config.py").read_text() == "my work\n"
    assert git(out, "rev-parse", "HEAD") == head


def test_foreign_commit_is_refused_and_force_keeps_a_recovery_ref(project, upstream, tmp_path, capsys):
    two_patches(project, upstream)
    out = tmp_path / "vllm"
    assert project.run("--base", f"path:{upstream.path}", "--out", str(out)) == 0
    (out / "vllm" / "config.py").write_text("committed work\n")
    git(out, "commit", "-qam", "my own commit")
    (out / "scratch.txt").write_text("uncommitted\n")
    assert project.run("--base", f"path:{upstream.path}", "--out", str(out)) == 2
    assert "my own commit" in capsys.readouterr().err
    assert project.run("--base", f"path:{upstream.path}", "--out", str(out), "--force") == 0
    ref = json.loads((tmp_path / "vllm-report.json").read_text())["recovery_ref"]
    assert ref.startswith("refs/overlay-recovery/")
    assert git(out, "show", f"{ref}:scratch.txt") == "uncommitted"
    assert git(out, "show", f"{ref}^:vllm/config.py") == "committed work"
    assert git(out, "log", "-1", "--format=%s", f"{ref}^") == "my own commit"
    assert (out / "vllm" / "config.py").read_text() == "A = 1\nB = 20\nC = 3\n"


def test_non_repo_output_dir_is_never_written(project, upstream, tmp_path, capsys):
    out = tmp_path / "vllm"
    out.mkdir()
    (out / "precious.txt").write_text("keep\n")
    assert project.run("--base", f"path:{upstream.path}", "--out", str(out), "--force") == 2
    assert "not a git repository" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == ["precious.txt"]


def test_overlay_replacing_a_moved_upstream_file_is_a_conflict(project, upstream, tmp_path):
    blob = git(upstream.path, "rev-parse", "HEAD:vllm/config.py")
    project.add_overlay("vllm/config.py", "A = 100\n", kind="replace", upstream_blob=blob)
    out = tmp_path / "vllm"
    assert project.run("--base", f"path:{upstream.path}", "--out", str(out)) == 0
    assert (out / "vllm" / "config.py").read_text() == "A = 100\n"
    # upstream moves the file: the overlay must not resurrect it silently
    upstream.commit({"vllm/config.py": None, "vllm/config/__init__.py": "A = 1\nB = 2\nC = 3\n"})
    out2 = tmp_path / "v2"
    assert project.run("--base", f"path:{upstream.path}", "--out", str(out2)) == 1
    rep = json.loads((tmp_path / "v2-report.json").read_text())
    assert rep["overlay"][0]["status"] == "target-missing"
    assert not (out2 / "vllm" / "config.py").exists()
    # upstream changes the file in place: conflict naming both blobs
    upstream.commit({"vllm/config.py": "A = 1\nB = 2\nC = 4\n", "vllm/config/__init__.py": None})
    out3 = tmp_path / "v3"
    assert project.run("--base", f"path:{upstream.path}", "--out", str(out3)) == 1
    o = json.loads((tmp_path / "v3-report.json").read_text())["overlay"][0]
    assert o["status"] == "conflict" and blob[:12] in o["detail"]


def test_overlay_file_missing_from_manifest_is_rejected(project, upstream, tmp_path, capsys):
    project.add_overlay("vllm/listed.py", "y = 1\n")
    (project.path / "overlay" / "vllm" / "stray.py").write_text("x = 1\n")
    assert project.run("--base", f"path:{upstream.path}", "--out", str(tmp_path / "vllm")) == 2
    assert "overlay/vllm/stray.py: not listed in the manifest" in capsys.readouterr().err
    assert not (tmp_path / "vllm").exists()


def test_continue_after_fixing_a_conflict_applies_the_rest(project, upstream, tmp_path):
    two_patches(project, upstream)
    project.add(upstream, "0003-after.patch", {"README.md": "ours\n"}, "[Misc] after", group="sm120")
    project.add_overlay("vllm/extra.py", "EXTRA = True\n")
    upstream.commit({"vllm/sampler.py": edited(SAMPLER, "line 4\n", "line FOUR\n")})
    out = tmp_path / "vllm"
    assert project.run("--base", f"path:{upstream.path}", "--out", str(out)) == 1
    assert project.run("--continue", "--out", str(out)) == 1  # nothing resolved yet
    (out / "vllm" / "sampler.py").write_text(edited(edited(SAMPLER, "line 4\n", "line FOUR\n"),
                                                    "line 5\n", "line five\n"))
    git(out, "add", "vllm/sampler.py")
    assert project.run("--continue", "--out", str(out)) == 0
    rep = json.loads((tmp_path / "vllm-report.json").read_text())
    assert [p["status"] for p in rep["patches"]] == ["applied", "applied", "applied"]
    assert rep["patches"][1]["resolved_by_hand"] is True
    assert (out / "README.md").read_text() == "ours\n" and (out / "vllm" / "extra.py").exists()
    assert len(git(out, "rev-list", "base..HEAD").split()) == 4
    # the finished tree is the tool's again: a rebuild is allowed without --force
    assert project.run("--base", f"path:{upstream.path}", "--out", str(out), "--3way") in (0, 1)


def test_abort_returns_the_tree_to_where_it_was(project, upstream, tmp_path):
    two_patches(project, upstream)
    out = tmp_path / "vllm"
    assert project.run("--base", f"path:{upstream.path}", "--out", str(out)) == 0
    before = git(out, "rev-parse", "HEAD")
    upstream.commit({"vllm/sampler.py": edited(SAMPLER, "line 4\n", "line FOUR\n")})
    assert project.run("--base", f"path:{upstream.path}", "--out", str(out)) == 1
    assert project.run("--abort", "--out", str(out)) == 0
    assert git(out, "rev-parse", "HEAD") == before
    assert not (out / ".git" / "rebase-apply").exists() and git(out, "status", "--porcelain") == ""
    # and the tool accepts the tree again afterwards
    upstream.commit({"vllm/sampler.py": SAMPLER})
    assert project.run("--base", f"path:{upstream.path}", "--out", str(out)) == 0


def test_interrupted_run_can_be_continued_or_aborted(project, upstream, tmp_path, monkeypatch):
    from patchstack import apply as apply_mod

    two_patches(project, upstream)
    real_am, calls = apply_mod._am, []

    def killed_after_first(tree, paths, three_way):
        calls.append(paths)
        if len(calls) > 1:
            raise KeyboardInterrupt
        return real_am(tree, paths[:1], three_way)  # "killed" after the first patch landed

    monkeypatch.setattr(apply_mod, "_am", killed_after_first)
    out = tmp_path / "vllm"
    assert project.run("--base", f"path:{upstream.path}", "--out", str(out)) == 130
    monkeypatch.setattr(apply_mod, "_am", real_am)
    assert len(git(out, "rev-list", "base..HEAD").split()) == 1
    assert project.run("--base", f"path:{upstream.path}", "--out", str(out)) == 2  # refused: a run stopped
    assert project.run("--continue", "--out", str(out)) == 0
    assert len(git(out, "rev-list", "base..HEAD").split()) == 2


def test_version_file_rewritten_by_an_editable_install_is_not_user_work(project, upstream, tmp_path):
    out = tmp_path / "vllm"
    assert project.run("--base", f"path:{upstream.path}", "--out", str(out)) == 0
    (out / "vllm" / "_version.py").write_text("__version__ = version = '9.9.9+dspark.1.empty'\n")
    assert project.run("--base", f"path:{upstream.path}", "--out", str(out)) == 0
    assert (out / "vllm" / "_version.py").read_text() == "__version__ = version = '9.9.9'\n"
    (out / "vllm" / "config.py").write_text("mine\n")  # but anything else still is
    assert project.run("--base", f"path:{upstream.path}", "--out", str(out)) == 2


def test_warm_rerun_keeps_unchanged_commits_and_equals_a_full_replay(project, upstream, tmp_path):
    two_patches(project, upstream)
    project.add(upstream, "0003-after.patch", {"README.md": "ours\n"}, "[Misc] after", group="sm120")
    out = tmp_path / "vllm"
    assert project.run("--base", f"path:{upstream.path}", "--out", str(out)) == 0
    first = git(out, "rev-list", "--reverse", "base..HEAD").split()
    # change the second patch only: the first commit is kept, the second and third are redone
    project.add(upstream, "0002-sampler.patch", {"vllm/sampler.py": edited(SAMPLER, "line 5\n", "line FIVE\n")},
                "[Spec Decode] name line five", group="block-verification")
    project.series["block-verification"] = ["block-verification/0002-sampler.patch"]
    project.write_series()
    assert project.run("--base", f"path:{upstream.path}", "--out", str(out)) == 0
    rep = json.loads((tmp_path / "vllm-report.json").read_text())
    assert [p.get("reused", False) for p in rep["patches"]] == [True, False, False]
    now = git(out, "rev-list", "--reverse", "base..HEAD").split()
    assert now[0] == first[0] and now[1] != first[1]
    assert "line FIVE" in (out / "vllm" / "sampler.py").read_text()
    # identical to replaying everything from the base in a fresh tree, and to --full here
    fresh = tmp_path / "fresh"
    assert project.run("--base", f"path:{upstream.path}", "--out", str(fresh)) == 0
    assert git(fresh, "rev-parse", "HEAD") == git(out, "rev-parse", "HEAD")
    assert project.run("--base", f"path:{upstream.path}", "--out", str(out), "--full") == 0
    rep = json.loads((tmp_path / "vllm-report.json").read_text())
    assert not any(p.get("reused") for p in rep["patches"])
    assert git(out, "rev-parse", "HEAD") == git(fresh, "rev-parse", "HEAD")


def test_abort_works_without_a_git_identity(project, upstream, tmp_path, monkeypatch):
    """A fresh machine has no ~/.gitconfig: git refuses `am --abort` without an identity, so the
    tool supplies its own where the user has none (a configured identity still wins)."""
    project.add(upstream, "0001-sampler.patch", {"vllm/sampler.py": edited(SAMPLER, "line 4\n", "line four\n")},
                "[Sampler] four")
    upstream.commit({"vllm/sampler.py": edited(SAMPLER, "line 4\n", "line FOUR\n")})
    home = tmp_path / "empty-home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    for var in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL", "EMAIL"):
        monkeypatch.delenv(var, raising=False)
    out = tmp_path / "vllm"
    assert project.run("--base", f"path:{upstream.path}", "--out", str(out)) == 1  # stops on the conflict
    assert project.run("--out", str(out), "--abort") == 0
    assert not (out / ".git" / "rebase-apply").exists()
