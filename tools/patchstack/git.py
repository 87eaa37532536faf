"""The few git operations, in one place.

Everything runs the git CLI with a fixed identity for the commits this tool makes, so the
same base and series give the same commit ids on every machine. Why the CLI and not GitPython
here: GitPython drives the same CLI, and what the tool needs most (am, apply --cached/--3way,
fast-import, read-tree into a private index) is outside its object API; one wrapper keeps the
tool's config overrides and identity in one place. GitPython is used where it adds something:
fetching from remotes (sources.py, provenance.py), with its error type and messages.
"""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path

from .errors import ToolError

TOOL_NAME = "vllm-overlay"
TOOL_EMAIL = "vllm-overlay@localhost"


def tool_env(date: str | None = None, author: bool = True) -> dict[str, str]:
    """Environment for commits made by the tool: fixed committer, optional fixed date."""
    env = dict(os.environ)
    env.update(GIT_COMMITTER_NAME=TOOL_NAME, GIT_COMMITTER_EMAIL=TOOL_EMAIL)
    if author:
        env.update(GIT_AUTHOR_NAME=TOOL_NAME, GIT_AUTHOR_EMAIL=TOOL_EMAIL)
    if date:
        env.update(GIT_COMMITTER_DATE=date, GIT_AUTHOR_DATE=date)
    # a user's hooks, templates or signing config must not change what the tool writes
    env.pop("GIT_DIR", None)
    env.pop("GIT_WORK_TREE", None)
    env.pop("GIT_INDEX_FILE", None)
    return env


@functools.cache
def _fallback_identity(home: str | None, xdg: str | None, global_config: str | None) -> tuple[tuple[str, str], ...]:
    """The tool's identity where the user has none: git refuses even `am --abort` (it writes a
    reflog) without one, and a fresh machine has no ~/.gitconfig. A configured identity wins."""
    if subprocess.run(["git", "var", "GIT_COMMITTER_IDENT"], capture_output=True).returncode == 0:
        return ()
    return (("GIT_COMMITTER_NAME", TOOL_NAME), ("GIT_COMMITTER_EMAIL", TOOL_EMAIL),
            ("GIT_AUTHOR_NAME", TOOL_NAME), ("GIT_AUTHOR_EMAIL", TOOL_EMAIL))


def _with_identity(env: dict | None) -> dict | None:
    base = os.environ if env is None else env
    missing = [(k, v) for k, v in _fallback_identity(base.get("HOME"), base.get("XDG_CONFIG_HOME"),
                                                     base.get("GIT_CONFIG_GLOBAL")) if k not in base]
    return env if not missing else {**base, **dict(missing)}


def run(repo: Path | None, *args: str, env: dict | None = None, check: bool = True,
        input: bytes | str | None = None, text: bool = True) -> subprocess.CompletedProcess:
    env = _with_identity(env)
    cmd = ["git", "-c", "safe.directory=*", "-c", "commit.gpgsign=false", "-c", "tag.gpgsign=false",
           "-c", "core.hooksPath=/dev/null", "-c", "advice.detachedHead=false"]
    if repo is not None:
        cmd += ["-C", str(repo)]
    cmd += list(args)
    if isinstance(input, str) and not text:
        input = input.encode()
    proc = subprocess.run(cmd, capture_output=True, text=text, input=input, env=env)
    if check and proc.returncode != 0:
        err = proc.stderr if text else proc.stderr.decode(errors="replace")
        raise ToolError(f"git {' '.join(args[:3])} failed in {repo}: {err.strip()}")
    return proc


def out(repo: Path | None, *args: str, **kw) -> str:
    return run(repo, *args, **kw).stdout.strip()


def git_dir(repo: Path) -> Path:
    dot = repo / ".git"
    if dot.is_dir():  # the common case, without a subprocess
        return dot.resolve()
    return Path(out(repo, "rev-parse", "--absolute-git-dir"))


def has_commit(repo: Path, rev: str) -> bool:
    return run(repo, "cat-file", "-e", f"{rev}^{{commit}}", check=False).returncode == 0


def rev(repo: Path, name: str) -> str | None:
    p = run(repo, "rev-parse", "--verify", "-q", f"{name}^{{commit}}", check=False)
    return p.stdout.strip() or None


def init(repo: Path, bare: bool = False) -> None:
    repo.mkdir(parents=True, exist_ok=True)
    run(repo, "init", "-q", *(["--bare"] if bare else []), "-b", "main")


def am_in_progress(repo: Path) -> bool:
    return (git_dir(repo) / "rebase-apply").is_dir()
