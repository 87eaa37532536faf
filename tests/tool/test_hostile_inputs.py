"""Broken and hostile inputs (issue 11): every case ends in a non-zero exit (or a correct,
explained outcome) with one line naming the file, no traceback, nothing written outside the
build tree, the report and patches/, and no work lost.

The CLI runs in-process: a traceback would surface here as an exception and fail the test.
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import json
import os
import signal
import tarfile
from pathlib import Path

import pytest

from tests.tool.repos import SAMPLER, TRAILERS, edited, git

# --- helpers ------------------------------------------------------------------------------------

def run(project, capsys, *args) -> tuple[int, str]:
    code = project.run(*args)
    out, err = capsys.readouterr()
    return code, out + err


def error_line(text: str, *needles: str) -> str:
    """The one `error:` line (the message may go on with detail lines) naming all ``needles``."""
    lines = [ln for ln in text.splitlines() if ln.startswith("error: ")]
    assert len(lines) == 1, text
    assert all(n in lines[0] for n in needles), (needles, lines[0])
    assert "Traceback" not in text
    return lines[0]


def snapshot(root: Path, *skip: Path) -> dict[str, bytes | str]:
    """Every file, link and directory under ``root`` (except ``skip``), for 'nothing else was written'."""
    found: dict[str, bytes | str] = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(dirpath) / name
            if any(p == s or p.is_relative_to(s) for s in skip):
                continue
            rel = p.relative_to(root).as_posix()
            found[rel] = ("link:" + os.readlink(p)) if p.is_symlink() else (
                "dir" if p.is_dir() else (p.read_bytes() if p.is_file() else "special"))
    return found


def base_args(upstream, out):
    return ("--base", f"path:{upstream.path}", "--out", str(out))


def a_patch(project, upstream, name="0001-config.patch", subject="[DSpark] B is 20", group="dspark"):
    return project.add(upstream, name, {"vllm/config.py": "A = 1\nB = 20\nC = 3\n"}, subject, group=group)


@pytest.fixture
def outside(tmp_path) -> Path:
    """A directory outside the project, the base and the build tree: nothing may be read or written there."""
    d = tmp_path / "elsewhere"
    d.mkdir()
    (d / "secret.txt").write_text("SECRET outside the project\n")
    return d


@pytest.fixture
def no_hang():
    """Fail (instead of hanging forever) when the tool blocks, e.g. opening a FIFO."""
    def boom(*_):
        raise TimeoutError("the tool blocked for 20 s")
    old = signal.signal(signal.SIGALRM, boom)
    signal.alarm(20)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


# --- containment --------------------------------------------------------------------------------

@pytest.mark.parametrize("entry", ["../../elsewhere/evil.patch", "ABSOLUTE", "dspark/../../../elsewhere/evil.patch"])
def test_series_entry_outside_patches_is_refused(project, upstream, tmp_path, outside, capsys, entry):
    mail = upstream.make_patch(outside / "evil.patch", {"README.md": "evil\n"}, "[Misc] evil")
    entry = str(mail) if entry == "ABSOLUTE" else entry
    (project.path / "patches" / "series").write_text(f"# dspark\n{entry}\n")
    before = snapshot(tmp_path, tmp_path / "cache")
    code, text = run(project, capsys, *base_args(upstream, tmp_path / "vllm"))
    assert code == 2
    error_line(text, "patches/series")
    assert "outside" in text or "'..'" in text or "absolute" in text
    assert snapshot(tmp_path, tmp_path / "cache") == before  # no tree, no report, nothing else


def test_symlinked_patch_pointing_outside_is_refused(project, upstream, tmp_path, outside, capsys):
    mail = upstream.make_patch(outside / "evil.patch", {"README.md": "evil\n"}, "[Misc] evil")
    link = project.path / "patches" / "dspark" / "0001-evil.patch"
    link.parent.mkdir()
    link.symlink_to(mail)
    project.series["dspark"].append("dspark/0001-evil.patch")
    project.write_series()
    code, text = run(project, capsys, *base_args(upstream, tmp_path / "vllm"))
    assert code == 2 and "0001-evil.patch points outside patches/" in text
    assert not (tmp_path / "vllm").exists()


def test_overlay_symlink_pointing_outside_is_never_copied(project, upstream, tmp_path, outside, capsys):
    project.add_overlay("vllm/leak.py", "placeholder\n")
    leak = project.path / "overlay" / "vllm" / "leak.py"
    leak.unlink()
    leak.symlink_to(outside / "secret.txt")
    code, text = run(project, capsys, *base_args(upstream, tmp_path / "vllm"))
    assert code == 2
    error_line(text, "overlay")
    assert "overlay/vllm/leak.py: is a symlink" in text
    assert not (tmp_path / "vllm").exists()


def test_overlay_directory_symlinked_outside_is_refused(project, upstream, tmp_path, outside, capsys):
    (project.path / "overlay" / "vllm").symlink_to(outside)
    (project.path / "overlay" / "manifest.toml").write_text('[[file]]\npath = "vllm/secret.txt"\nkind = "new"\n')
    code, text = run(project, capsys, *base_args(upstream, tmp_path / "vllm"))
    assert code == 2 and "overlay/vllm: is a symlink" in error_line(text)
    assert not (tmp_path / "vllm").exists()


def test_base_with_a_symlinked_directory_cannot_make_the_overlay_write_outside(project, upstream, tmp_path,
                                                                              outside, capsys):
    # a git base (path: to a repository) whose vllm/v1 is a symlink to a directory outside
    os.symlink(outside, upstream.path / "vllm" / "v1")
    git(upstream.path, "add", "vllm/v1")
    git(upstream.path, "commit", "-qm", "hostile symlink")
    project.add_overlay("vllm/v1/planted.py", "PLANTED = True\n")
    out = tmp_path / "vllm"
    code, text = run(project, capsys, *base_args(upstream, out))
    assert code == 1  # the overlay does not fit this base: a reported conflict, the run can be aborted
    assert "overlay/vllm/v1/planted.py" in text and "symlink at vllm/v1" in text
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert run(project, capsys, "--abort", "--out", str(out))[0] == 0


def test_plain_directory_base_with_a_symlink_out_is_refused(project, tmp_path, outside, capsys):
    base = tmp_path / "plain"
    (base / "vllm").mkdir(parents=True)
    (base / "vllm" / "a.py").write_text("a = 1\n")
    (base / "vllm" / "v1").symlink_to(outside)
    code, text = run(project, capsys, "--base", f"path:{base}", "--out", str(tmp_path / "vllm"))
    assert code == 2 and "vllm/v1 is a symlink to" in error_line(text) and "nothing was imported" in text
    assert not (tmp_path / "vllm").exists()


# --- sdist members: refused before anything reaches the bases cache ------------------------------

def _member(name: str, kind: bytes = tarfile.REGTYPE, data: bytes = b"x = 1\n", link: str = "") -> tuple:
    return name, kind, data, link


HOSTILE_MEMBERS = {
    "dotdot": _member("vllm-1.2.3/../../escape.py"),
    "dotdot-inner": _member("vllm-1.2.3/vllm/../../escape.py"),
    "absolute": _member("/tmp/escape.py"),
    "symlink-absolute": _member("vllm-1.2.3/vllm/passwd", tarfile.SYMTYPE, link="/etc/passwd"),
    "symlink-escaping": _member("vllm-1.2.3/vllm/up", tarfile.SYMTYPE, link="../../../etc"),
    "hardlink": _member("vllm-1.2.3/vllm/hard", tarfile.LNKTYPE, link="vllm-1.2.3/vllm/__init__.py"),
    "fifo": _member("vllm-1.2.3/vllm/fifo", tarfile.FIFOTYPE),
    "second-top-dir": _member("other-9.9/vllm/__init__.py"),
    "git-dir": _member("vllm-1.2.3/.git/config"),
    "duplicate": _member("vllm-1.2.3/vllm/__init__.py", data=b"HIDDEN = 1\n"),
}


def _hostile_sdist(path: Path, extra: tuple) -> None:
    members = [_member("vllm-1.2.3/vllm/__init__.py", data=b""),
               _member("vllm-1.2.3/vllm/_version.py", data=b"__version__ = version = '1.2.3'\n"), extra]
    with tarfile.open(path, "w:gz", format=tarfile.GNU_FORMAT) as tar:
        for name, kind, data, link in members:
            info = tarfile.TarInfo(name)
            info.type, info.mtime, info.mode, info.linkname = kind, 1700000000, 0o644, link
            info.size = len(data) if kind == tarfile.REGTYPE else 0
            tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)


@pytest.mark.parametrize("case", sorted(HOSTILE_MEMBERS))
def test_sdist_with_a_hostile_member_never_reaches_the_cache(project, tmp_path, isolated_cache, monkeypatch,
                                                             capsys, case):
    index = tmp_path / "index" / "vllm"
    index.mkdir(parents=True)
    sdist = index / "vllm-1.2.3.tar.gz"
    _hostile_sdist(sdist, HOSTILE_MEMBERS[case])
    sha = hashlib.sha256(sdist.read_bytes()).hexdigest()
    (index / "index.html").write_text(f'<a href="vllm-1.2.3.tar.gz#sha256={sha}">vllm-1.2.3.tar.gz</a>')
    monkeypatch.setenv("PIP_INDEX_URL", index.parent.as_uri())
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "")
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    code, text = run(project, capsys, "--base", "pypi:1.2.3", "--out", str(tmp_path / "vllm"))
    assert code == 2
    error_line(text, "vllm-1.2.3.tar.gz")
    assert "nothing was imported" in text
    bases = isolated_cache / "bases.git"
    assert git(bases, "count-objects", "-v").splitlines()[0] == "count: 0"  # not one blob written
    assert git(bases, "for-each-ref") == ""
    assert not (tmp_path / "vllm").exists() and not (tmp_path / "escape.py").exists()


def test_real_looking_sdist_symlink_inside_the_tree_is_kept(project, tmp_path, isolated_cache):
    from patchstack import git as pgit
    from patchstack import sources

    sdist = tmp_path / "vllm-1.2.3.tar.gz"
    _hostile_sdist(sdist, _member("vllm-1.2.3/vllm/alias.py", tarfile.SYMTYPE, link="_version.py"))
    repo = sources.bases_repo()
    commit, n = sources.import_tarball(repo, sdist, "test\n")
    assert n == 3 and pgit.out(repo, "cat-file", "-p", f"{commit}:vllm/alias.py") == "_version.py"


# --- validation: a schema check of every input, up front ------------------------------------------

VERSION_CASES = {
    "base-is-a-string": (lambda t: "base = 'x'\n" + t.replace("[base]\n", "[base_]\n"), "[base] is a string"),
    "no-overlay-table": (lambda t: t.replace("[overlay]\n", "[overlay_]\n"), "[overlay] is missing"),
    "overlay-version-int": (lambda t: t.replace('version = "0.34.0+dspark.1"', "version = 1"),
                            "[overlay].version: is an integer"),
    "sha-malformed": (lambda t: t.replace('sdist_sha256 = "fcad', 'sdist_sha256 = "zz'),
                      "[base].sdist_sha256: 'zz"),
    "sha-uppercase": (lambda t: t.replace("fcad848b246a9d8652b47e6425af92334dc02492f98",
                                          "FCAD848B246A9D8652B47E6425AF92334DC02492F98"), "64 lowercase hex"),
    "sha-short": (lambda t: t.replace("e27b823cf0113", ""), "[base].sdist_sha256"),
    "vllm-path": (lambda t: t.replace('vllm = "0.34.0"', 'vllm = "../../../etc/x"'), "[base].vllm"),
    "vllm-int": (lambda t: t.replace('vllm = "0.34.0"', "vllm = 34"), "[base].vllm: is an integer"),
    "sdist-with-dirs": (lambda t: t.replace('sdist = "vllm-0.34.0.tar.gz"', 'sdist = "../x.tar.gz"'),
                        "[base].sdist"),
    "missing-key": (lambda t: t.replace('wheel = "', 'wheel_ = "'), "[base].wheel: missing"),
    "not-toml": (lambda t: t + "\n[[[\n", "not valid TOML"),
}


@pytest.mark.parametrize("case", sorted(VERSION_CASES))
def test_version_of_the_wrong_shape_names_the_key(project, upstream, tmp_path, capsys, case):
    change, expected = VERSION_CASES[case]
    version = project.path / "VERSION"
    version.write_text(change(version.read_text()))
    code, text = run(project, capsys, *base_args(upstream, tmp_path / "vllm"))
    assert code == 2
    error_line(text, str(version), expected)
    assert "delete" not in text and not (tmp_path / "vllm").exists()


def test_malformed_sha_in_version_does_not_blame_a_good_cached_sdist(project, tmp_path, isolated_cache, capsys):
    good = isolated_cache / "sdist" / "vllm-0.34.0.tar.gz"
    good.parent.mkdir(parents=True)
    good.write_bytes(b"a cached sdist, fine as it is")
    version = project.path / "VERSION"
    version.write_text(version.read_text().replace('sdist_sha256 = "fcad848b', 'sdist_sha256 = "fcad848g'))
    code, text = run(project, capsys, "--out", str(tmp_path / "vllm"))
    assert code == 2 and "cached" not in text and "delete" not in text
    error_line(text, "VERSION", "sdist_sha256", "64 lowercase hex")
    assert good.read_bytes() == b"a cached sdist, fine as it is"


@pytest.mark.parametrize("name", ["VERSION", "patches/series", "overlay/manifest.toml"])
def test_input_file_that_is_not_utf8_names_file_and_line(project, upstream, tmp_path, capsys, name):
    a_patch(project, upstream)
    project.add_overlay("vllm/extra.py", "E = 1\n")
    path = project.path / name
    path.write_bytes(path.read_bytes() + b"\n# caf\xe9\n")
    code, text = run(project, capsys, *base_args(upstream, tmp_path / "vllm"))
    assert code == 2
    line = error_line(text, str(path), "not UTF-8")
    lineno = path.read_bytes().count(b"\n")
    assert f"{path}:{lineno}:" in line
    assert not (tmp_path / "vllm").exists()


MANIFEST_CASES = {
    "file-is-a-string": ('file = "vllm/extra.py"\n', "array of tables"),
    "file-is-a-table": ('[file]\npath = "vllm/extra.py"\nkind = "new"\n', "array of tables"),
    "no-kind": ('[[file]]\npath = "vllm/extra.py"\n', "kind: missing"),
    "bad-kind": ('[[file]]\npath = "vllm/extra.py"\nkind = "fork"\n', "'fork' is not \"new\" or \"replace\""),
    "path-int": ("[[file]]\npath = 3\nkind = \"new\"\n", "path: is an integer"),
    "path-dotdot": ('[[file]]\npath = "vllm/../../../x.py"\nkind = "new"\n', "contains '..'"),
    "path-absolute": ('[[file]]\npath = "/etc/x.py"\nkind = "new"\n', "absolute"),
    "replace-no-blob": ('[[file]]\npath = "vllm/extra.py"\nkind = "replace"\n', "upstream_blob: missing"),
    "replace-bad-blob": ('[[file]]\npath = "vllm/extra.py"\nkind = "replace"\nupstream_blob = "abc"\n',
                         "'abc' is not the upstream blob"),
    "typo-key": ('[[file]]\npath = "vllm/extra.py"\nkind = "new"\nupstrem_blob = "x"\n', "unknown key 'upstrem_blob'"),
    "unknown-table": ('[[files]]\npath = "vllm/extra.py"\nkind = "new"\n', "unknown top-level key 'files'"),
}


@pytest.mark.parametrize("case", sorted(MANIFEST_CASES))
def test_manifest_of_the_wrong_shape_names_the_entry(project, upstream, tmp_path, capsys, case):
    text, expected = MANIFEST_CASES[case]
    (project.path / "overlay" / "vllm").mkdir()
    (project.path / "overlay" / "vllm" / "extra.py").write_text("E = 1\n")
    manifest = project.path / "overlay" / "manifest.toml"
    manifest.write_text(text)
    code, out = run(project, capsys, *base_args(upstream, tmp_path / "vllm"))
    assert code == 2
    error_line(out, str(manifest))
    assert expected in out
    assert not (tmp_path / "vllm").exists()


def test_ledger_of_the_wrong_shape_fails_the_check_naming_it(project, capsys):
    (project.path / "patches" / "UPSTREAMED.toml").write_text('upstreamed = "everything"\n')
    code, text = run(project, capsys, "--check")
    assert code == 2 and "UPSTREAMED.toml: `upstreamed` must be an array of tables" in error_line(text)


def test_damaged_state_file_is_named_and_force_recovers(project, upstream, tmp_path, capsys):
    a_patch(project, upstream)
    out = tmp_path / "vllm"
    assert run(project, capsys, *base_args(upstream, out))[0] == 0
    state = out / ".git" / "vllm-overlay" / "state.json"
    state.write_text('{"run": ')  # a disk that filled up, an editor, ...
    code, text = run(project, capsys, *base_args(upstream, out))
    assert code == 2 and "state.json: the tool's state file is damaged" in text and "Traceback" not in text
    for cmd in ("--continue", "--abort"):
        code, text = run(project, capsys, cmd, "--out", str(out))
        assert code == 2
        error_line(text, "state.json", "damaged")
    assert run(project, capsys, *base_args(upstream, out), "--force")[0] == 0


# --- export never loses work --------------------------------------------------------------------

def built(project, upstream, tmp_path, capsys):
    a_patch(project, upstream)
    out = tmp_path / "vllm"
    assert run(project, capsys, *base_args(upstream, out))[0] == 0
    return out


@pytest.mark.parametrize("edit", ["modified", "untracked", "staged"])
def test_export_refuses_edits_it_would_not_export(project, upstream, tmp_path, capsys, edit):
    out = built(project, upstream, tmp_path, capsys)
    target = out / ("vllm/new_module.py" if edit == "untracked" else "vllm/sampler.py")
    target.write_text("my unsaved work\n")
    if edit == "staged":
        git(out, "add", "vllm/sampler.py")
    before = snapshot(project.path)
    code, text = run(project, capsys, "--export", "--out", str(out))
    assert code == 2
    error_line(text, str(out), target.relative_to(out).as_posix())
    assert snapshot(project.path) == before and target.read_text() == "my unsaved work\n"


def test_export_of_two_commits_with_the_same_subject_keeps_both(project, upstream, tmp_path, capsys):
    out = built(project, upstream, tmp_path, capsys)
    # a follow-up commit reusing the subject of the listed patch, and a pair of new twins
    for path, text, subject in (("vllm/sampler.py", "follow-up\n", "[DSpark] B is 20"),
                                ("README.md", "one\n", "[Misc] tweak"), ("README.md", "two\n", "[Misc] tweak")):
        (out / path).write_text(text)
        git(out, "commit", "-qam", f"{subject}\n\nWhy.\n\n{TRAILERS}")
    first = (project.path / "patches" / "dspark" / "0001-config.patch").read_bytes()
    assert run(project, capsys, "--export", "--out", str(out))[0] == 0
    listed = [ln for ln in (project.path / "patches" / "series").read_text().splitlines()
              if ln and not ln.startswith("#")]
    assert len(listed) == 4 and len(set(listed)) == 4 and listed[0] == "dspark/0001-config.patch"
    assert all((project.path / "patches" / name).is_file() for name in listed)
    assert (project.path / "patches" / "dspark" / "0001-config.patch").read_bytes() == first
    # the export applies again, to the same content
    v2 = tmp_path / "v2"
    assert run(project, capsys, *base_args(upstream, v2))[0] == 0
    assert git(v2, "rev-parse", "HEAD^{tree}") == git(out, "rev-parse", "HEAD^{tree}")


def test_export_never_clobbers_a_patch_edited_or_added_since_the_build(project, upstream, tmp_path, capsys):
    out = built(project, upstream, tmp_path, capsys)
    mine = project.add(upstream, "0002-readme.patch", {"README.md": "new patch, not applied yet\n"},
                       "[Misc] readme")  # written to patches/ after the tree was built
    before = snapshot(project.path)
    code, text = run(project, capsys, "--export", "--out", str(out))
    assert code == 2
    error_line(text, "patches/dspark/0002-readme.patch", "would overwrite or delete")
    assert snapshot(project.path) == before and mine.is_file()
    # an edit of a built patch in patches/ is protected the same way
    first = project.path / "patches" / "dspark" / "0001-config.patch"
    first.write_text(first.read_text().replace("Reason: a test patch", "Reason: edited in patches/"))
    project.series["dspark"].remove("dspark/0002-readme.patch")
    project.write_series()
    mine.unlink()
    code, text = run(project, capsys, "--export", "--out", str(out))
    assert code == 2 and "patches/dspark/0001-config.patch" in error_line(text)
    assert "edited in patches/" in first.read_text()


# --- interruption -------------------------------------------------------------------------------

def _interrupt_once(monkeypatch, module, name, when):
    real = getattr(module, name)
    fired = []

    def wrapper(*args, **kw):
        if not fired and when(*args, **kw):
            fired.append(True)
            if name == "init":
                real(*args, **kw)  # killed right after `git init` succeeded
            raise KeyboardInterrupt
        return real(*args, **kw)

    monkeypatch.setattr(module, name, wrapper)
    return real


@pytest.mark.parametrize("then", ["rerun", "--abort"])
def test_run_killed_right_after_git_init(project, upstream, tmp_path, monkeypatch, capsys, then):
    from patchstack import git as pgit

    a_patch(project, upstream)
    out = tmp_path / "vllm"
    _interrupt_once(monkeypatch, pgit, "init", lambda repo, bare=False: not bare)
    code, text = run(project, capsys, *base_args(upstream, out))
    assert code == 130 and (out / ".git").is_dir()
    assert "--continue" not in text  # nothing to continue: the advice must be what works
    if then == "rerun":
        assert run(project, capsys, *base_args(upstream, out))[0] == 0
        assert git(out, "log", "-1", "--format=%s", "HEAD") == "[DSpark] B is 20"
    else:
        code, text = run(project, capsys, "--abort", "--out", str(out))
        assert code == 0 and "removed" in text and not out.exists()


@pytest.mark.parametrize("then", ["--continue", "--abort"])
def test_rerun_killed_while_the_tree_moves_to_the_base(project, upstream, tmp_path, monkeypatch, capsys, then):
    """Killed between the checkout of the base and the tag: the tree holds no state for this run yet
    (before the fix), so neither --continue nor --abort nor a rerun accepted it."""
    from patchstack import git as pgit

    out = built(project, upstream, tmp_path, capsys)
    first_head = git(out, "rev-parse", "HEAD")
    project.add(upstream, "0002-readme.patch", {"README.md": "two\n"}, "[Misc] readme")
    _interrupt_once(monkeypatch, pgit, "run", lambda repo, *a, **kw: a[:1] == ("tag",))
    assert run(project, capsys, *base_args(upstream, out))[0] == 130
    monkeypatch.undo()
    code, text = run(project, capsys, then, "--out", str(out))
    assert code == 0, text
    if then == "--continue":
        assert git(out, "log", "--format=%s", "base..HEAD").splitlines() == ["[Misc] readme", "[DSpark] B is 20"]
    else:
        assert git(out, "rev-parse", "HEAD") == first_head
    assert run(project, capsys, *base_args(upstream, out))[0] == 0  # and the next run accepts the tree


def test_ctrl_c_inside_git_am_then_continue_reports_the_real_stop(project, upstream, tmp_path, monkeypatch, capsys):
    """Killed after `git am` stopped but before the tool recorded why: --continue must not ask git
    to continue a patch nobody resolved; it finds the stop again and reports it."""
    from patchstack import apply as apply_mod

    a_patch(project, upstream)
    project.add(upstream, "0002-sampler.patch", {"vllm/sampler.py": edited(SAMPLER, "line 5\n", "line five\n")},
                "[Misc] five")
    upstream.commit({"vllm/sampler.py": edited(SAMPLER, "line 4\n", "line FOUR\n")})
    real_am = apply_mod._am

    def am_then_killed(tree, paths, three_way):
        real_am(tree, paths, three_way)
        raise KeyboardInterrupt

    monkeypatch.setattr(apply_mod, "_am", am_then_killed)
    out = tmp_path / "vllm"
    assert run(project, capsys, *base_args(upstream, out))[0] == 130
    monkeypatch.undo()
    assert (out / ".git" / "rebase-apply").is_dir()
    code, text = run(project, capsys, "--continue", "--out", str(out))
    assert code == 1 and "Traceback" not in text
    rep = json.loads((tmp_path / "vllm-report.json").read_text())
    assert [p["status"] for p in rep["patches"]] == ["applied", "conflict"]
    assert "expected 'line 4', found 'line FOUR'" in rep["patches"][1]["hunks"][0]["mismatch"]
    # the person's part works as usual from here
    resolved = edited(edited(SAMPLER, "line 4\n", "line FOUR\n"), "line 5\n", "line five\n")
    (out / "vllm" / "sampler.py").write_text(resolved)
    git(out, "add", "vllm/sampler.py")
    assert run(project, capsys, "--continue", "--out", str(out))[0] == 0


@pytest.mark.parametrize("command", ["build", "--continue", "--abort", "--export"])
def test_second_concurrent_run_is_refused_by_the_lock(project, upstream, tmp_path, capsys, command):
    out = built(project, upstream, tmp_path, capsys)
    head = git(out, "rev-parse", "HEAD")
    fd = os.open(out, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)  # the first run, still working
    try:
        args = base_args(upstream, out) if command == "build" else (command, "--out", str(out))
        code, text = run(project, capsys, *args)
    finally:
        os.close(fd)
    assert code == 2
    error_line(text, str(out), "another tools/apply.py run holds the lock")
    assert "--force" not in text and "--abort" not in text
    assert git(out, "rev-parse", "HEAD") == head


# --- odd files and paths ------------------------------------------------------------------------

def test_fifo_in_a_path_base_is_refused_not_read(project, tmp_path, capsys, no_hang):
    base = tmp_path / "plain"
    (base / "vllm").mkdir(parents=True)
    (base / "vllm" / "a.py").write_text("a = 1\n")
    os.mkfifo(base / "vllm" / "pipe")
    code, text = run(project, capsys, "--base", f"path:{base}", "--out", str(tmp_path / "vllm"))
    assert code == 2 and "vllm/pipe is a FIFO" in error_line(text)


@pytest.mark.parametrize("name", ["VERSION", "overlay/manifest.toml"])
def test_fifo_as_an_input_file_is_refused_not_read(project, upstream, tmp_path, capsys, no_hang, name):
    path = project.path / name
    path.unlink(missing_ok=True)
    os.mkfifo(path)
    code, text = run(project, capsys, *base_args(upstream, tmp_path / "vllm"))
    assert code == 2 and "is a FIFO, expected a regular file" in error_line(text, str(path))


def test_fifo_listed_as_a_patch_is_named_as_such(project, upstream, tmp_path, capsys, no_hang):
    (project.path / "patches" / "dspark").mkdir()
    os.mkfifo(project.path / "patches" / "dspark" / "0001-pipe.patch")
    project.series["dspark"].append("dspark/0001-pipe.patch")
    project.write_series()
    code, text = run(project, capsys, *base_args(upstream, tmp_path / "vllm"))
    assert code == 2 and "dspark/0001-pipe.patch is listed but is a FIFO" in text


OUTPUT_CASES = {
    "out-is-a-file": (lambda t: ("--out", str(t / "afile")), "--out", "is a file"),
    "out-under-a-file": (lambda t: ("--out", str(t / "afile" / "vllm")), "--out", "afile is a file"),
    "report-under-a-file": (lambda t: ("--out", str(t / "vllm"), "--report", str(t / "afile" / "r.json")),
                            "--report", "afile is a file"),
    "report-is-a-dir": (lambda t: ("--out", str(t / "vllm"), "--report", str(t)), "--report", "is a directory"),
    "report-in-the-tree": (lambda t: ("--out", str(t / "vllm"), "--report", str(t / "vllm" / "r.json")),
                           "--report", "inside the build tree"),
}


@pytest.mark.parametrize("case", sorted(OUTPUT_CASES))
def test_outputs_are_checked_before_the_work(project, upstream, tmp_path, isolated_cache, capsys, case):
    args, flag, expected = OUTPUT_CASES[case]
    a_patch(project, upstream)
    (tmp_path / "afile").write_text("a file, not a directory\n")
    before = snapshot(tmp_path, isolated_cache)
    code, text = run(project, capsys, "--base", f"path:{upstream.path}", *args(tmp_path))
    assert code == 2
    error_line(text, flag, expected)
    assert not (isolated_cache / "bases.git").exists()  # checked before the base was even imported
    assert snapshot(tmp_path, isolated_cache) == before


def test_out_inside_the_project_patches_is_refused(project, upstream, capsys):
    code, text = run(project, capsys, "--base", f"path:{upstream.path}", "--out", str(project.path / "patches" / "b"))
    assert code == 2 and "overlaps the project's patches/" in error_line(text)
    assert not (project.path / "patches" / "b").exists()


# --- weak messages: the tool's own words --------------------------------------------------------

def test_crlf_patch_is_named_as_such(project, upstream, tmp_path, capsys):
    p = a_patch(project, upstream)
    p.write_bytes(p.read_bytes().replace(b"\n", b"\r\n"))
    code, text = run(project, capsys, *base_args(upstream, tmp_path / "vllm"))
    assert code == 2 and "0001-config.patch: has CRLF (Windows) line endings" in text
    assert not (tmp_path / "vllm").exists()


def test_patch_file_holding_two_mails_is_named_as_such(project, upstream, tmp_path, capsys):
    p = a_patch(project, upstream)
    q = upstream.make_patch(tmp_path / "other.patch", {"README.md": "two\n"}, "[Misc] second")
    p.write_text(p.read_text() + q.read_text())
    code, text = run(project, capsys, *base_args(upstream, tmp_path / "vllm"))
    assert code == 2 and "0001-config.patch: holds 2 mails" in text
    assert not (tmp_path / "vllm").exists()


def test_patch_touching_a_missing_file_says_so(project, upstream, tmp_path, capsys):
    with_file = upstream.commit({"vllm/gone.py": "x = 1\n"}, "add gone.py")
    project.add(upstream, "0001-gone.patch", {"vllm/gone.py": "x = 2\n"}, "[Misc] gone", on=with_file)
    upstream.commit({"vllm/gone.py": None}, "remove gone.py")
    code, text = run(project, capsys, *base_args(upstream, tmp_path / "vllm"))
    assert code == 1
    assert "target-missing" in text and "vllm/gone.py" in text
    assert "not in the base" in text  # the tool's words, and advice that fits


def test_patch_creating_a_file_the_base_already_has_says_so(project, upstream, tmp_path, capsys):
    project.add(upstream, "0001-new.patch", {"vllm/newmod.py": "ours\n"}, "[Misc] new module")
    upstream.commit({"vllm/newmod.py": "theirs\n"}, "upstream adds the same module")
    code, text = run(project, capsys, *base_args(upstream, tmp_path / "vllm"))
    assert code == 1
    assert "the patch creates this file, but the base already has it" in text and "vllm/newmod.py" in text


# --- more of the catalogue -----------------------------------------------------------------------

def test_export_refuses_a_commit_that_edits_an_overlay_file(project, upstream, tmp_path, capsys):
    a_patch(project, upstream)
    project.add_overlay("vllm/extra.py", "E = 1\n")
    out = tmp_path / "vllm"
    assert run(project, capsys, *base_args(upstream, out))[0] == 0
    (out / "vllm" / "extra.py").write_text("E = 2\n")
    git(out, "commit", "-qam", f"[Misc] tweak the overlay file\n\nWhy.\n\n{TRAILERS}")
    before = snapshot(project.path)
    code, text = run(project, capsys, "--export", "--out", str(out))
    assert code == 2
    error_line(text, "vllm/extra.py", "overlay/")
    assert snapshot(project.path) == before


def test_cache_directory_that_is_a_file_is_one_line(project, upstream, tmp_path, monkeypatch, capsys):
    (tmp_path / "cachefile").write_text("not a directory\n")
    monkeypatch.setenv("VLLM_OVERLAY_CACHE", str(tmp_path / "cachefile"))
    code, text = run(project, capsys, *base_args(upstream, tmp_path / "vllm"))
    assert code == 2 and "cachefile" in error_line(text)
    assert (tmp_path / "cachefile").read_text() == "not a directory\n"


def test_patches_are_kept_byte_exact_by_git_checkouts():
    from tests.tool.repos import ROOT

    attrs = git(ROOT, "check-attr", "text", "--", "patches/dspark/0001-full-trained-block.patch")
    assert attrs.endswith("text: unset")  # no CRLF conversion, whatever core.autocrlf says


@pytest.mark.parametrize("then", ["--continue", "--abort"])
def test_ctrl_c_while_committing_the_overlay(project, upstream, tmp_path, monkeypatch, capsys, then):
    from patchstack import git as pgit

    a_patch(project, upstream)
    project.add_overlay("vllm/extra.py", "E = 1\n")
    out = tmp_path / "vllm"
    _interrupt_once(monkeypatch, pgit, "run", lambda repo, *a, **kw: a[:1] == ("commit-tree",) and repo == out)
    code, text = run(project, capsys, *base_args(upstream, out))
    assert code == 130 and "--continue" in text  # the state says a run is under way: the advice fits
    monkeypatch.undo()
    assert run(project, capsys, then, "--out", str(out))[0] == 0
    assert git(out, "status", "--porcelain") == ""
    if then == "--continue":
        assert (out / "vllm" / "extra.py").read_text() == "E = 1\n"
        assert git(out, "log", "-1", "--format=%s") == "overlay: 1 file(s) from overlay/"
    assert run(project, capsys, *base_args(upstream, out))[0] == 0


@pytest.mark.parametrize("name", ["patches", "overlay"])
def test_project_directory_symlinked_outside_is_refused(project, upstream, tmp_path, outside, capsys, name):
    real = project.path / name
    real.rename(outside / name)
    real.symlink_to(outside / name)
    for args in (base_args(upstream, tmp_path / "vllm"), ("--check",)):
        code, text = run(project, capsys, *args)
        assert code == 2
        error_line(text, str(real), "outside the project")
    assert not (tmp_path / "vllm").exists()


def test_series_entry_that_is_a_directory_is_named_as_such(project, upstream, tmp_path, capsys):
    (project.path / "patches" / "dspark" / "0001-dir.patch").mkdir(parents=True)
    project.series["dspark"].append("dspark/0001-dir.patch")
    project.write_series()
    code, text = run(project, capsys, *base_args(upstream, tmp_path / "vllm"))
    assert code == 2 and "dspark/0001-dir.patch is listed but is a directory, not a patch file" in error_line(text)
