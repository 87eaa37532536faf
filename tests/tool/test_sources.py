"""Bases: PyPI sdist through pip's configured index (a local one here), git remotes, paths."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest
from patchstack import sources
from patchstack.errors import ToolError
from patchstack.pin import read_pin

from tests.tool.repos import git


def make_sdist(path: Path, version: str) -> Path:
    """A small sdist shaped like vLLM's: a .gitignore that ignores real files, a stale egg-info."""
    files = {
        ".gitignore": "/vllm/_version.py\n*.so\nbuild/\n",
        "vllm/__init__.py": "",
        "vllm/_version.py": f"__version__ = version = '{version}'\ncommit_id = 'gabc1234'\n",
        "vllm/_C.so": "not really a library",
        "build/keep.txt": "a real file under an ignored dir",
        "tools/run.sh": "#!/bin/sh\necho hi\n",
        "vllm.egg-info/PKG-INFO": "Version: 0.0.0\n",
        "PKG-INFO": f"Version: {version}\n",
    }
    with tarfile.open(path, "w:gz") as tar:
        for rel, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"vllm-{version}/{rel}")
            info.size, info.mtime, info.uid = len(data), 1700000000, 4242
            info.mode = 0o755 if rel.endswith(".sh") else 0o644
            tar.addfile(info, io.BytesIO(data))
    return path


@pytest.fixture
def local_index(tmp_path, monkeypatch):
    """A PEP 503 index on disk, configured the way a user configures pip (PIP_INDEX_URL)."""
    root = tmp_path / "index"
    (root / "vllm").mkdir(parents=True)
    sdist = make_sdist(root / "vllm" / "vllm-1.2.3.tar.gz", "1.2.3")
    sha = hashlib.sha256(sdist.read_bytes()).hexdigest()
    (root / "vllm" / "index.html").write_text(
        f'<html><body><a href="vllm-1.2.3.tar.gz#sha256={sha}">vllm-1.2.3.tar.gz</a></body></html>')
    monkeypatch.setenv("PIP_INDEX_URL", root.as_uri())
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "")
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    return root, sha


def pin_for(project, sha: str, version: str = "1.2.3"):
    text = (project.path / "VERSION").read_text()
    text = text.replace('vllm = "0.34.0"', f'vllm = "{version}"').replace(
        'sdist = "vllm-0.34.0.tar.gz"', f'sdist = "vllm-{version}.tar.gz"')
    import re
    text = re.sub(r'sdist_sha256 = "[0-9a-f]+"', f'sdist_sha256 = "{sha}"', text)
    (project.path / "VERSION").write_text(text)
    return read_pin(project.path / "VERSION")


def test_pypi_sdist_imports_every_file_once_and_deterministically(project, local_index, isolated_cache,
                                                                  tmp_path):
    root, sha = local_index
    pin = pin_for(project, sha)
    base = sources.resolve("", pin)
    assert base.kind == "pypi" and base.sha256 == sha and base.version == "1.2.3"
    assert base.upstream_commit == "abc1234"
    repo = sources.bases_repo()
    files = set(git(repo, "ls-tree", "-r", "--name-only", base.commit).splitlines())
    # every tarball file, including those the sdist's own .gitignore ignores; no stale egg-info
    assert files == {".gitignore", "vllm/__init__.py", "vllm/_version.py", "vllm/_C.so", "build/keep.txt",
                     "tools/run.sh", "PKG-INFO"}
    assert base.files == 7
    assert "100755" in git(repo, "ls-tree", base.commit, "tools/run.sh")
    # cached: with the index gone, the same spec still resolves, to the same commit
    (root / "vllm" / "vllm-1.2.3.tar.gz").unlink()
    assert sources.resolve("pypi:1.2.3", pin).commit == base.commit
    # a fresh cache re-imports the same tarball to the same commit id (fixed author and date)
    again = tmp_path / "cache2"
    cached = isolated_cache / "sdist" / "vllm-1.2.3.tar.gz"
    (again / "sdist").mkdir(parents=True)
    (again / "sdist" / cached.name).write_bytes(cached.read_bytes())
    import os
    os.environ["VLLM_OVERLAY_CACHE"] = str(again)
    assert sources.resolve("pypi:1.2.3", pin).commit == base.commit


def test_sha256_mismatch_writes_nothing(project, local_index, isolated_cache, tmp_path, capsys):
    root, sha = local_index
    pin_for(project, "0" * 64)
    out = tmp_path / "vllm"
    assert project.run("--out", str(out)) == 2
    err = capsys.readouterr().err
    assert "vllm-1.2.3.tar.gz" in err and "0" * 64 in err
    assert not out.exists()
    assert not list((isolated_cache / "sdist").glob("*")) if (isolated_cache / "sdist").exists() else True


def test_tampered_download_is_rejected(project, local_index, isolated_cache, tmp_path, capsys):
    root, sha = local_index
    pin_for(project, sha)
    tar = root / "vllm" / "vllm-1.2.3.tar.gz"
    tar.write_bytes(tar.read_bytes() + b"tampered")
    assert project.run("--out", str(tmp_path / "vllm")) == 2
    assert "sha256 mismatch" in capsys.readouterr().err
    assert not (isolated_cache / "sdist" / "vllm-1.2.3.tar.gz").exists()


def test_end_to_end_apply_on_a_pypi_base(project, local_index, tmp_path):
    root, sha = local_index
    pin_for(project, sha)
    out = tmp_path / "vllm"
    assert project.run("--out", str(out)) == 0
    assert (out / "vllm" / "_version.py").exists() and (out / "build" / "keep.txt").exists()
    rep = json.loads((tmp_path / "vllm-report.json").read_text())
    assert rep["base"]["spec"] == "pypi:1.2.3" and rep["base"]["sha256"] == sha


@pytest.fixture
def remote(tmp_path):
    """A bare 'upstream' remote with main, a tag and an extra commit, served over file://."""
    src = tmp_path / "src"
    src.mkdir()
    git(src, "init", "-q", "-b", "main")
    (src / "vllm").mkdir()
    (src / "vllm" / "_version.py").write_text("__version__ = version = '0.34.0'\n")
    git(src, "add", "-A")
    git(src, "commit", "-qm", "release")
    git(src, "tag", "v0.34.0")
    tagged = git(src, "rev-parse", "HEAD")
    (src / "vllm" / "new.py").write_text("x = 1\n")
    git(src, "add", "-A")
    git(src, "commit", "-qm", "nightly work")
    tip = git(src, "rev-parse", "HEAD")
    bare = tmp_path / "remote.git"
    git(tmp_path, "clone", "-q", "--bare", str(src), str(bare))
    git(bare, "config", "uploadpack.allowAnySHA1InWant", "true")
    return bare.as_uri(), tagged, tip


def test_git_remote_nightly_tag_and_sha(project, remote, tmp_path):
    pytest.importorskip("git")
    url, tagged, tip = remote
    pin = read_pin(project.path / "VERSION")
    nightly = sources.resolve("nightly", pin, url)
    assert nightly.commit == tip and nightly.ref == "main" and nightly.source == url
    assert git(sources.bases_repo(), "rev-parse", f"{tip}^{{commit}}") == tip
    tag = sources.resolve("v0.34.0", pin, url)
    assert tag.commit == tagged and tag.version == "0.34.0"
    assert sources.resolve(tagged, pin, url).commit == tagged
    # the build tree and the report carry the resolved sha
    out = tmp_path / "vllm"
    assert project.run("--base", "nightly", "--remote", url, "--out", str(out)) == 0
    rep = json.loads((tmp_path / "vllm-report.json").read_text())
    assert rep["base"]["commit"] == tip and rep["base"]["ref"] == "main"
    assert git(out, "rev-parse", "base") == tip


def test_remote_from_environment(project, remote, monkeypatch):
    pytest.importorskip("git")
    url, tagged, tip = remote
    monkeypatch.setenv("VLLM_OVERLAY_REMOTE", url)
    assert sources.resolve("nightly", read_pin(project.path / "VERSION")).commit == tip


def test_unreachable_remote_names_it_and_writes_nothing(project, tmp_path, capsys):
    pytest.importorskip("git")
    out = tmp_path / "vllm"
    url = (tmp_path / "no-such-remote.git").as_uri()
    assert project.run("--base", "nightly", "--remote", url, "--out", str(out)) == 2
    err = capsys.readouterr().err
    assert url in err and "pypi:" in err and "path:" in err
    assert not out.exists()


def test_bad_specs(project):
    pin = read_pin(project.path / "VERSION")
    with pytest.raises(ToolError, match="not understood"):
        sources.resolve("latest-and-greatest!", pin)
    with pytest.raises(ToolError, match="40 hex digits"):
        sources.resolve("abc1234", pin, "file:///nowhere")
    with pytest.raises(ToolError, match="not a directory"):
        sources.resolve("path:/no/such/dir", pin)


def test_path_base_plain_directory(project, tmp_path):
    d = tmp_path / "plain"
    (d / "vllm").mkdir(parents=True)
    (d / "vllm" / "a.py").write_text("a = 1\n")
    (d / ".gitignore").write_text("*.py\n")
    base = sources.resolve(f"path:{d}", read_pin(project.path / "VERSION"))
    assert base.files == 2
    assert git(sources.bases_repo(), "show", f"{base.commit}:vllm/a.py") == "a = 1"
