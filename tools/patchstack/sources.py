"""Bases: a PyPI sdist, a git remote (nightly, tag, sha) or a local path, turned into one commit.

Every base lands as a commit in one cached bare repository (``bases.git`` in the cache dir), so
a second run downloads and imports nothing. An sdist is imported with ``git fast-import``
straight from the tarball: every file of the tarball (the sdist's own .gitignore would drop
real sources such as vllm/_version.py), fixed author and date, so the same tarball always
gives the same commit id and no extracted file can trip git's ownership check.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import git, progress, schema
from .errors import ToolError
from .pin import Pin

UPSTREAM_REMOTE = "https://github.com/vllm-project/vllm.git"
REMOTE_ENV = "VLLM_OVERLAY_REMOTE"
CACHE_ENV = "VLLM_OVERLAY_CACHE"
# The sdist ships the egg-info of the machine that built it. In an editable install that stale
# directory sits on sys.path before the fresh metadata and reports the wrong version and
# requirements, so the base leaves it out (it is build output, not source).
DROPPED_FROM_SDIST = ("vllm.egg-info/",)
SDIST_NOTE = "vllm.egg-info/ of the sdist left out of the base (stale build metadata)"
IMPORT_IDENTITY = "vLLM upstream (sdist import) <vllm-overlay@localhost>"


@dataclass
class Base:
    spec: str
    kind: str  # pypi | git | path
    commit: str
    version: str | None = None
    sha256: str | None = None
    source: str | None = None
    ref: str | None = None
    upstream_commit: str | None = None
    files: int | None = None
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v not in (None, [])}


def cache_dir() -> Path:
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(xdg) / "vllm-overlay"


def bases_repo() -> Path:
    repo = cache_dir() / "bases.git"
    if not (repo / "HEAD").exists():
        git.init(repo, bare=True)
    return repo


def resolve(spec: str, pin: Pin, remote: str | None = None) -> Base:
    """Turn a --base spec into a commit in the cache repository."""
    if spec in ("", "pinned"):
        spec = f"pypi:{pin.vllm}"
    if spec.startswith("pypi:"):
        if not schema.VERSION_RE.fullmatch(spec[5:]):
            raise ToolError(f"--base {spec!r}: {spec[5:]!r} is not a version like 0.34.0")
        return _from_pypi(spec, spec[5:], pin)
    if spec.startswith("path:"):
        return _from_path(spec, Path(spec[5:]).expanduser())
    if spec.startswith("git:"):
        spec = spec[4:]
    if spec == "nightly" or re.fullmatch(r"v\d[\w.+-]*", spec) or re.fullmatch(r"[0-9a-f]{7,40}", spec):
        return _from_git(spec, remote or os.environ.get(REMOTE_ENV) or UPSTREAM_REMOTE)
    raise ToolError(f"--base {spec!r}: not understood; use pypi:X.Y.Z, nightly, a tag like v0.34.0, "
                    "a commit sha, git:REF or path:DIR")


# --- PyPI sdist -----------------------------------------------------------------------------

def _from_pypi(spec: str, version: str, pin: Pin) -> Base:
    from . import index  # urllib, ssl: only when a download may be needed
    filename = f"vllm-{version}.tar.gz"
    pinned = pin.sdist_sha256 if version == pin.vllm else None
    tarball = cache_dir() / "sdist" / filename
    repo = bases_repo()
    if pinned and (commit := git.rev(repo, f"refs/tags/pypi/{version}-{pinned[:16]}")):
        # imported from a tarball that matched the pin: neither download nor hash again
        return Base(spec=spec, kind="pypi", commit=commit, version=version, sha256=pinned, source=str(tarball),
                    upstream_commit=_version_at(repo, commit, "commit"), notes=[SDIST_NOTE])
    if tarball.exists() and pinned and index.sha256_of(tarball) != pinned:
        raise ToolError(f"{tarball}: cached file does not match the pinned sha256 {pinned}; "
                        "delete it to download again")
    if not tarball.exists():
        print(f"base: downloading {filename} from the configured package index", file=sys.stderr)
        found = index.find_file("vllm", filename)
        index.download(found, tarball, pinned)
    sha = pinned or index.sha256_of(tarball)
    tag = f"refs/tags/pypi/{version}-{sha[:16]}"
    commit = git.rev(repo, tag)
    nfiles = None
    if commit is None:
        commit, nfiles = import_tarball(repo, tarball, f"vLLM {version} (PyPI sdist)\n\nsdist sha256: {sha}\n")
        git.run(repo, "update-ref", tag, commit)
    return Base(spec=spec, kind="pypi", commit=commit, version=version, sha256=sha, source=str(tarball),
                upstream_commit=_version_at(repo, commit, "commit"), files=nfiles, notes=[SDIST_NOTE])


def _fast_import_stream(entries, message: str, date: int):
    """Yield a git fast-import stream: one blob per entry, then one commit."""
    for mark, (_, _, data) in enumerate(entries, start=1):
        yield b"blob\nmark :%d\ndata %d\n" % (mark, len(data)) + data + b"\n"
    msg = message.encode()
    yield (b"commit refs/heads/import\ncommitter %s %d +0000\ndata %d\n%s\ndeleteall\n"
           % (IMPORT_IDENTITY.encode(), date, len(msg), msg))
    for mark, (path, mode, _) in enumerate(entries, start=1):
        yield b"M %s :%d %s\n" % (mode.encode(), mark, _quote(path).encode())
    yield b"\n"


def _quote(path: str) -> str:
    if any(c in path for c in '"\\\n') or path.startswith(" "):
        return '"' + path.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    return path


def _import(repo: Path, entries: list[tuple[str, str, bytes]], message: str, date: int) -> str:
    """Write ``entries`` (path, git mode, content) as one parentless commit; return its id."""
    entries.sort(key=lambda e: e[0])
    stream = b"".join(_fast_import_stream(entries, message, date))
    git.run(repo, "fast-import", "--quiet", "--force", input=stream, text=False)
    commit = git.out(repo, "rev-parse", "refs/heads/import")
    git.run(repo, "update-ref", "-d", "refs/heads/import")
    got = int(git.out(repo, "ls-tree", "-r", "-z", "--name-only", commit).count("\0"))
    if got != len(entries):
        raise ToolError(f"import of {len(entries)} files produced a tree of {got}: refusing an incomplete base")
    return commit


def import_tarball(repo: Path, tarball: Path, message: str) -> tuple[str, int]:
    """Import every file of an sdist tarball (top directory stripped) as one commit."""
    import tarfile
    entries: list[tuple[str, str, bytes]] = []
    date = bar_pos = 0
    top = None
    try:
        # progress in compressed bytes read: the member count is unknown until the end
        with open(tarball, "rb") as raw, tarfile.open(fileobj=raw) as tar, \
                progress.tracker(f"importing {tarball.name}", tarball.stat().st_size) as bar:
            for member in tar:
                top = _check_member(tarball, member, top)
                parts = member.name.split("/", 1)
                if len(parts) < 2 or not parts[1] or member.isdir():
                    continue
                path = parts[1].rstrip("/")
                if path.startswith(DROPPED_FROM_SDIST):
                    continue
                if member.issym():
                    entries.append((path, "120000", member.linkname.encode()))
                elif member.isfile():
                    mode = "100755" if member.mode & 0o111 else "100644"
                    entries.append((path, mode, tar.extractfile(member).read()))
                else:
                    raise ToolError(f"{tarball}: {member.name}: unsupported member type in an sdist")
                date = max(date, int(member.mtime))
                bar.update(raw.tell() - bar_pos)
                bar_pos = raw.tell()
    except (tarfile.TarError, EOFError, OSError) as e:
        raise ToolError(f"{tarball}: not a readable tarball: {e}") from None
    _check_unique(tarball, entries)
    print(f"  importing {tarball.name}: {len(entries)} files into the base commit", file=sys.stderr)
    return _import(repo, entries, message, date), len(entries)


def _check_member(tarball: Path, member, top: str | None) -> str:
    """Refuse a member that could land outside the tree: checked before anything reaches the cache.

    Every member sits under one top directory, by a plain relative path; a symlink points within
    the tree; hard links, devices and FIFOs are refused. Returns the top directory.
    """
    name = member.name.rstrip("/")
    where = f"{tarball}: member {member.name!r}"
    if why := schema.safe_relpath(name):
        raise ToolError(f"{where}: its path {why}; refusing the sdist (nothing was imported)")
    first = name.split("/", 1)[0]
    if top is not None and first != top:
        raise ToolError(f"{where}: outside the sdist's top directory {top}/; refusing the sdist (nothing was imported)")
    if member.issym() and (why := _link_escapes(name, member.linkname)):
        raise ToolError(f"{where}: symlink to {member.linkname!r} {why}; refusing the sdist (nothing was imported)")
    if not (member.isfile() or member.isdir() or member.issym()):
        kind = "a hard link" if member.islnk() else "a device, FIFO or other special member"
        raise ToolError(f"{where}: is {kind}; an sdist holds files, directories and symlinks only "
                        "(nothing was imported)")
    return first


def _link_escapes(name: str, target: str) -> str | None:
    """Why a symlink at ``name`` (relative to the tree's parent) pointing at ``target`` leaves the tree."""
    if not target or target.startswith("/"):
        return "is absolute or empty"
    depth = name.count("/") - 1  # directories between the tree root and the link (top dir stripped)
    for part in target.split("/"):
        depth += -1 if part == ".." else (0 if part in ("", ".") else 1)
        if depth < 0:
            return "points outside the tree"
    return None


def _check_unique(source: Path, entries: list[tuple[str, str, bytes]]) -> None:
    seen: set[str] = set()
    dirs = {p.rsplit("/", 1)[0] for p, _, _ in entries if "/" in p}
    dirs |= {d.rsplit("/", i)[0] for d in list(dirs) for i in range(1, d.count("/") + 1)}
    for path, _, _ in entries:
        if path in seen or path in dirs:
            raise ToolError(f"{source}: {path} appears twice (or as both a file and a directory); "
                            "refusing an ambiguous base (nothing was imported)")
        seen.add(path)


# --- git remote ------------------------------------------------------------------------------

def _from_git(spec: str, remote: str) -> Base:
    """Fetch one commit, shallow, from ``remote`` with GitPython; record the resolved sha."""
    try:
        import git as gitpython  # GitPython
    except ImportError:
        raise ToolError("--base from a git remote needs GitPython: pip install -r tools/requirements.txt") from None
    repo = bases_repo()
    if spec == "nightly":
        want, ref = "refs/heads/main", "main"
    elif re.fullmatch(r"[0-9a-f]{40}", spec):
        want, ref = spec, spec
    elif re.fullmatch(r"[0-9a-f]{7,39}", spec):
        if git.has_commit(repo, spec):
            want = ref = git.out(repo, "rev-parse", f"{spec}^{{commit}}")
        else:
            raise ToolError(f"--base {spec}: a short sha cannot be fetched from a remote; give all 40 hex digits")
    else:
        want, ref = f"refs/tags/{spec}", spec
    if git.has_commit(repo, want) and len(want) == 40:
        commit = want  # an exact sha already fetched: nothing to do
    else:
        print(f"base: fetching {ref} from {remote} (shallow)", file=sys.stderr)
        try:
            gitpython.Repo(repo).git.fetch("--depth=1", "--no-tags", remote, f"{want}:refs/overlay-fetch/tmp",
                                           env={"GIT_TERMINAL_PROMPT": "0"})
        except gitpython.GitCommandError as e:
            detail = (e.stderr or "").strip().splitlines()
            raise ToolError(f"cannot fetch {ref!r} from {remote}: {detail[-1] if detail else e}. "
                            "Without network to that remote, use --base pypi:X.Y.Z or --base path:DIR "
                            f"(or --remote / ${REMOTE_ENV} for a mirror)") from None
        commit = git.out(repo, "rev-parse", "refs/overlay-fetch/tmp^{commit}")
        safe_ref = re.sub(r"[^\w.-]", "_", ref)
        git.run(repo, "update-ref", f"refs/overlay-bases/{safe_ref}", commit)
        git.run(repo, "update-ref", "-d", "refs/overlay-fetch/tmp")
    return Base(spec=spec, kind="git", commit=commit, source=remote, ref=ref, version=_version_at(repo, commit))


def _version_at(repo: Path, commit: str, what: str = "version") -> str | None:
    """The version (or upstream commit id) that setuptools-scm wrote into vllm/_version.py, if any."""
    p = git.run(repo, "show", f"{commit}:vllm/_version.py", check=False)
    pattern = r"__version__ = version = '([^']+)'" if what == "version" else r"commit_id = 'g?([0-9a-f]+)'"
    m = re.search(pattern, p.stdout) if p.returncode == 0 else None
    return m.group(1) if m else None


# --- local path -----------------------------------------------------------------------------

def _from_path(spec: str, path: Path) -> Base:
    if not path.is_dir():
        raise ToolError(f"--base {spec}: {path} is not a directory")
    repo = bases_repo()
    if (path / ".git").exists():
        head = git.rev(path, "HEAD")
        if head is None:
            raise ToolError(f"--base {spec}: {path} is a git repository without commits")
        notes = []
        if git.out(path, "status", "--porcelain"):
            notes.append(f"{path} has uncommitted changes; the base is its HEAD {head[:12]}")
        git.run(repo, "fetch", "-q", "--no-tags", str(path.resolve()), f"{head}:refs/overlay-fetch/tmp")
        git.run(repo, "update-ref", "-d", "refs/overlay-fetch/tmp")
        return Base(spec=spec, kind="path", commit=head, source=str(path.resolve()), notes=notes,
                    version=_version_at(repo, head))
    entries = []
    for root, dirs, files in os.walk(path):
        # a symlink to a directory is listed in dirs but not walked: keep it as the symlink it is
        files += [d for d in dirs if (Path(root) / d).is_symlink()]
        dirs[:] = sorted(d for d in dirs if d != ".git" and not (Path(root) / d).is_symlink())
        for name in sorted(files):
            full = Path(root) / name
            rel = full.relative_to(path).as_posix()
            if full.is_symlink():
                target = os.readlink(full)
                if why := _link_escapes("top/" + rel, target):
                    raise ToolError(f"--base {spec}: {full} is a symlink to {target!r} that {why}; "
                                    "a base must stay within itself (nothing was imported)")
                entries.append((rel, "120000", target.encode()))
            elif kind := schema.special(full):
                raise ToolError(f"--base {spec}: {full} is {kind}; a base holds regular files, directories "
                                "and symlinks only (nothing was imported)")
            else:
                mode = "100755" if os.access(full, os.X_OK) else "100644"
                entries.append((rel, mode, full.read_bytes()))
    if not entries:
        raise ToolError(f"--base {spec}: {path} is empty")
    commit = _import(repo, entries, f"local tree {path.resolve()}\n", 0)
    git.run(repo, "update-ref", f"refs/overlay-bases/path-{commit[:16]}", commit)
    return Base(spec=spec, kind="path", commit=commit, source=str(path.resolve()), files=len(entries),
                version=_version_at(repo, commit))
