"""Tiny upstream repositories and projects for testing tools/apply.py with real git.

Shared by tests/tool and tests/integration under a real module name (tests.tool.repos),
so any selection of the test directories runs in one pytest call."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from patchstack import cli
from patchstack.export import FORMAT_PATCH

ROOT = Path(__file__).resolve().parents[2]

TRAILERS = ("Upstream-Status: Pending\nUpstream-PR: none\nDrop-When: upstream does it\n"
            "Reason: a test patch\n")
UPSTREAM_FILES = {
    "vllm/__init__.py": "",
    "vllm/sampler.py": "".join(f"line {i}\n" for i in range(1, 41)),
    "vllm/config.py": "A = 1\nB = 2\nC = 3\n",
    "README.md": "upstream\n",
    ".gitignore": "vllm/_version.py\n",
    "vllm/_version.py": "__version__ = version = '9.9.9'\n",
}


def git(cwd, *args, env=None, strip=True):
    e = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
             GIT_COMMITTER_EMAIL="t@t", GIT_AUTHOR_DATE="2026-01-01T00:00:00Z",
             GIT_COMMITTER_DATE="2026-01-01T00:00:00Z")
    e.update(env or {})
    out = subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True, text=True, env=e).stdout
    return out.strip() if strip else out


def write_files(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


class Upstream:
    """A tiny upstream vLLM: a git repository whose commits tests can add and turn into patches."""

    def __init__(self, path: Path):
        self.path = path
        path.mkdir(parents=True)
        git(path, "init", "-q", "-b", "main")
        write_files(path, UPSTREAM_FILES)
        git(path, "add", "-A", "-f")
        git(path, "commit", "-qm", "upstream v1")
        self.v1 = git(path, "rev-parse", "HEAD")

    def commit(self, files: dict[str, str | None], message: str = "upstream change") -> str:
        for rel, text in files.items():
            if text is None:
                git(self.path, "rm", "-q", rel)
            else:
                write_files(self.path, {rel: text})
                git(self.path, "add", "-f", rel)
        git(self.path, "commit", "-qm", message)
        return git(self.path, "rev-parse", "HEAD")

    def make_patch(self, dest: Path, files: dict[str, str | None], subject: str, on: str | None = None,
                   trailers: str = TRAILERS) -> Path:
        """Commit ``files`` on a side branch from ``on`` (default v1) and write it as a mail to ``dest``."""
        work = self.path.parent / f"work-{dest.stem}"
        if work.exists():
            shutil.rmtree(work)
        git(self.path.parent, "clone", "-q", str(self.path), str(work))
        git(work, "checkout", "-q", on or self.v1)
        for rel, text in files.items():
            if text is None:
                git(work, "rm", "-q", rel)
            else:
                write_files(work, {rel: text})
                git(work, "add", "-f", rel)
        git(work, "commit", "-qm", f"{subject}\n\nWhy this change.\n\n{trailers}",
            env={"GIT_AUTHOR_NAME": "DSpark overlay", "GIT_AUTHOR_EMAIL": "d@o"})
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(git(work, *FORMAT_PATCH, "-1", "HEAD", strip=False))
        return dest


class Project:
    """A project checkout (patches/, overlay/, VERSION) in a temp dir."""

    def __init__(self, path: Path):
        self.path = path
        (path / "patches").mkdir(parents=True)
        (path / "overlay").mkdir()
        (path / "VERSION").write_text((ROOT / "VERSION").read_text())
        self.series = {"dspark": [], "block-verification": [], "sm120": [], "tilelang": []}
        self.write_series()

    def write_series(self):
        from patchstack.export import series_text
        (self.path / "patches" / "series").write_text(series_text(self.series))

    def add(self, upstream: Upstream, name: str, files, subject: str, group: str = "dspark", **kw) -> Path:
        p = upstream.make_patch(self.path / "patches" / group / name, files, subject, **kw)
        self.series[group].append(f"{group}/{name}")
        self.write_series()
        return p

    def add_overlay(self, path: str, text: str, kind: str = "new", upstream_blob: str | None = None):
        write_files(self.path / "overlay", {path: text})
        with open(self.path / "overlay" / "manifest.toml", "a") as fh:
            fh.write(f'\n[[file]]\npath = "{path}"\nkind = "{kind}"\n')
            if upstream_blob:
                fh.write(f'upstream_blob = "{upstream_blob}"\n')

    def run(self, *args: str, capsys=None) -> int:
        return cli.main(["--project", str(self.path), *args])


SAMPLER = "".join(f"line {i}\n" for i in range(1, 41))


def edited(text: str, old: str, new: str) -> str:
    assert old in text
    return text.replace(old, new, 1)
