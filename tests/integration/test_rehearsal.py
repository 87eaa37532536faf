"""A real rebase rehearsal between two upstream releases (vLLM 0.33.0 -> 0.34.0, both from PyPI).

Upstream changed ``vllm/v1/worker/gpu/sample/penalties.py`` between the two releases (it
parenthesised ``use_rep_penalty or use_freq_penalty or use_pres_penalty`` for Triton backends
that reject the chained form). Expressed as a patch on 0.33.0, ``--status`` against 0.34.0 must
call it already upstream and print the ledger entry; against 0.33.0 it applies. A live patch of
this project is classified against 0.33.0 the way ``git apply`` on that tree dictates.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest
from patchstack import sources
from patchstack.export import FORMAT_PATCH, series_text

from tests.tool.repos import ROOT, git

PENALTIES = "vllm/v1/worker/gpu/sample/penalties.py"
TRAILERS = ("Upstream-Status: Backport [0.34.0]\nUpstream-PR: 62d4bc3c7\n"
            "Drop-When: rebased onto 0.34.0 or later\nReason: Triton backends reject chained `or`\n")


def upstream_change_as_patch(base_old, base_new, dest):
    """Commit 0.34.0's penalties.py on top of 0.33.0 in the bases repo (index only) and mail it."""
    repo = sources.bases_repo()
    fd, idx = tempfile.mkstemp()
    os.close(fd)
    env = dict(os.environ, GIT_INDEX_FILE=idx, GIT_AUTHOR_NAME="DSpark overlay", GIT_AUTHOR_EMAIL="d@o",
               GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t", GIT_AUTHOR_DATE="2026-11-01T00:00:00Z",
               GIT_COMMITTER_DATE="2026-11-01T00:00:00Z")
    try:
        git(repo, "read-tree", base_old.commit, env=env)
        blob = git(repo, "rev-parse", f"{base_new.commit}:{PENALTIES}")
        git(repo, "update-index", "--cacheinfo", f"100644,{blob},{PENALTIES}", env=env)
        tree = git(repo, "write-tree", env=env)
    finally:
        os.unlink(idx)
    msg = f"[Sampler] parenthesise the penalty condition\n\nBackported from upstream.\n\n{TRAILERS}"
    commit = git(repo, "commit-tree", tree, "-p", base_old.commit, "-m", msg, env=env)
    dest.write_text(subprocess.run(["git", "-C", str(repo), *FORMAT_PATCH, "-1", commit], check=True,
                                   capture_output=True, text=True).stdout)


@pytest.fixture
def rehearsal_project(tmp_path, base_0330, base_0340):
    proj = tmp_path / "project"
    (proj / "patches" / "dspark").mkdir(parents=True)
    (proj / "overlay").mkdir()
    shutil.copy(ROOT / "VERSION", proj / "VERSION")
    upstream_change_as_patch(base_0330, base_0340, proj / "patches" / "dspark" / "0001-penalties.patch")
    series = {"dspark": ["dspark/0001-penalties.patch"]}
    live = sorted((ROOT / "patches").glob("block-verification/*.patch"))[:1]
    for p in live:
        (proj / "patches" / "block-verification").mkdir(exist_ok=True)
        shutil.copy(p, proj / "patches" / "block-verification" / p.name)
        series["block-verification"] = [f"block-verification/{p.name}"]
    (proj / "patches" / "series").write_text(series_text(series))
    return proj, live


def status(proj, base, tmp_path):
    report = tmp_path / f"status-{base}.json"
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "apply.py"), "--project", str(proj),
                           "--status", "--base", base, "--report", str(report)], capture_output=True, text=True)
    return proc, json.loads(report.read_text())


def test_upstream_change_is_reported_already_upstream_on_the_new_release(rehearsal_project, tmp_path):
    proj, _ = rehearsal_project
    proc, rep = status(proj, "pypi:0.34.0", tmp_path)
    first = rep["patches"][0]
    assert first["file"] == "dspark/0001-penalties.patch"
    assert first["status"] == "already-upstream"
    assert first["decision"].startswith("drop") and "[[upstreamed]]" in proc.stdout
    assert 'first_release = "0.34.0"' in proc.stdout and first["upstream_status"] == "Backport [0.34.0]"
    assert proc.returncode == 1  # not clean: something must be dropped


def test_same_patch_applies_on_the_old_release_and_live_patch_is_classified_as_git_dictates(
        rehearsal_project, tmp_path, base_0330):
    proj, live = rehearsal_project
    proc, rep = status(proj, "pypi:0.33.0", tmp_path)
    assert rep["patches"][0]["status"] == "applied"
    if not live:
        pytest.skip("no live block-verification patch in the series yet")
    # the oracle: does our live patch apply exactly to a 0.33.0 tree (plus the penalties patch)?
    repo = sources.bases_repo()
    fd, idx = tempfile.mkstemp()
    os.close(fd)
    env = dict(os.environ, GIT_INDEX_FILE=idx)
    try:
        git(repo, "read-tree", base_0330.commit, env=env)
        exact = subprocess.run(["git", "-C", str(repo), "apply", "--cached", "--check", str(live[0])],
                               env=env, capture_output=True).returncode == 0
    finally:
        os.unlink(idx)
    got = rep["patches"][1]["status"]
    if exact:
        assert got == "applied"
    else:
        assert got in ("applied-3way", "conflict", "partly-upstream", "target-missing")
        if got == "conflict":
            assert rep["patches"][1]["hunks"] and rep["patches"][1]["files"]
