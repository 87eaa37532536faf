"""The real series and overlay on the real vLLM 0.34.0 sdist, through the CLI users run."""

from __future__ import annotations

import json
import subprocess
import sys

from patchstack.apply import Project, load_series
from patchstack.overlay import read_manifest

from tests.tool.repos import ROOT, git


def test_real_series_applies_exactly_to_the_pinned_sdist(base_0340, pin, tmp_path):
    out = tmp_path / "vllm"
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "apply.py"), "--out", str(out)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    project = Project(ROOT)
    patches = load_series(project)
    overlay_files = read_manifest(project.overlay_dir)
    commits = git(out, "rev-list", "base..HEAD").split()
    assert len(commits) == len(patches) + (1 if overlay_files else 0)
    assert git(out, "rev-parse", "base") == base_0340.commit
    assert git(out, "describe", "--tags", "--exact-match", "base") == "base"
    # the base is the whole sdist: _version.py (ignored by vLLM's .gitignore) is there, egg-info is not
    assert "commit_id = 'g" + pin.commit + "'" in (out / "vllm" / "_version.py").read_text()
    assert not (out / "vllm.egg-info").exists() or git(out, "ls-files", "vllm.egg-info") == ""
    rep = json.loads((tmp_path / "vllm-report.json").read_text())
    assert rep["base"]["sha256"] == pin.sdist_sha256 and rep["base"]["upstream_commit"] == pin.commit
    assert [p["status"] for p in rep["patches"]] == ["applied"] * len(patches)
    assert git(out, "status", "--porcelain") == ""


def test_check_passes_on_the_committed_stack():
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "apply.py"), "--check"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "byte-identical re-export" in proc.stdout
