"""benchmarks/gpu/prepare.py: what the GPU pack holds, the device's size limit, refusals.

Real git repositories (a tiny patched tree with a `base` tag, a tiny checkout), real tar and
xz files; the wheels are small zip files named as pip names them, so nothing is downloaded.
"""

from __future__ import annotations

import io
import json
import lzma
import tarfile
import zipfile
from pathlib import Path

import pytest

from benchmarks.gpu import needs, prepare, run
from benchmarks.gpu.stage import Stage
from tests.tool.repos import git, write_files

BASE_FILES = {
    "vllm/__init__.py": "",
    "vllm/_version.py": "__version__ = version = '9.9.9'\n",
    "vllm/sampler.py": "def sample():\n    return 'base'\n",
    "vllm/gone.py": "OLD = 1\n",
    "vllm/kernels/tests/test_kernels.py": "def test_x():\n    pass\n",
    "tests/v1/test_upstream.py": "def test_upstream():\n    pass\n",
    "setup.py": "# not packed\n",
}


def make_tree(root: Path) -> Path:
    """A patched tree as tools/apply.py leaves it: base commit tagged `base`, then changes."""
    root.mkdir(parents=True)
    git(root, "init", "-q", "-b", "main")
    write_files(root, BASE_FILES)
    (root / "vllm" / "_C.abi3.so").write_bytes(b"\x7fELF compiled")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "base")
    git(root, "tag", "base")
    write_files(root, {"vllm/sampler.py": "def sample():\n    return 'patched'\n",
                       "vllm/new_overlay.py": "NEW = 1\n"})
    (root / "vllm" / "gone.py").unlink()
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "patches and overlay")
    return root


def make_checkout(root: Path, extra_bytes: int = 0) -> Path:
    root.mkdir(parents=True)
    git(root, "init", "-q", "-b", "main")
    write_files(root, {"README.md": "project\n", "benchmarks/gpu/README.md": "harness\n"})
    if extra_bytes:
        (root / "big.bin").write_bytes(b"x" * extra_bytes)
    (root / ".gitignore").write_text("/.gpu-*/\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "checkout")
    return root


def fake_wheel(folder: Path, requirement: str, tag: str = "py3-none-any") -> Path:
    name, version = requirement.split("==")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name.replace('-', '_')}-{version}-{tag}.whl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{name.replace('-', '_')}/__init__.py", "")
    return path


def stage(name: str, needs_: tuple[str, ...] = (), tree_files: tuple[str, ...] = ()) -> Stage:
    return Stage(name=name, doc="", run=lambda ctx: {}, time_cap_s=10, needs=needs_, tree_files=tree_files)


@pytest.fixture
def tree(tmp_path):
    return make_tree(tmp_path / "tree")


@pytest.fixture
def checkout(tmp_path):
    return make_checkout(tmp_path / "checkout")


@pytest.fixture
def cache(tmp_path):
    cache = tmp_path / "gpu-cache"
    for requirement in needs.WHEELS["vllm-sampler-deps"]:
        fake_wheel(cache / "wheels-cp312", requirement)
    # another version of one of them, which must not be picked
    fake_wheel(cache / "wheels-cp312", "pydantic==1.0.0")
    return cache


def tar_members(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}


def test_pack_holds_patched_tree_base_delta_and_the_stages_wheels(tree, checkout, cache, tmp_path):
    out = checkout / ".gpu-test"
    manifest = prepare.prepare([stage("a", ("base", "vllm-sampler-deps"), ("tests/v1/test_upstream.py",))],
                               tree, out, repo=checkout, cache=cache)

    files = tar_members(out / "tree.tar.xz")
    assert lzma.decompress((out / "tree.tar.xz").read_bytes())  # really xz
    assert files["vllm/sampler.py"] == b"def sample():\n    return 'patched'\n"
    assert "vllm/new_overlay.py" in files and "tests/v1/test_upstream.py" in files
    assert "vllm/gone.py" not in files
    assert not [n for n in files if n.endswith(".so") or "/tests/" in n and n.startswith("vllm/")]
    assert "setup.py" not in files

    base = tar_members(out / "base-delta.tar.gz")
    assert base == {"vllm/sampler.py": b"def sample():\n    return 'base'\n", "vllm/gone.py": b"OLD = 1\n"}
    assert manifest["base"]["added"] == ["vllm/new_overlay.py"]
    assert manifest["base"]["commit"] == git(tree, "rev-parse", "base")
    assert manifest["tree"]["commit"] == git(tree, "rev-parse", "HEAD")

    wheels = sorted(p.name for p in (out / "wheels").iterdir())
    assert len(wheels) == len(needs.WHEELS["vllm-sampler-deps"])
    assert "pydantic-2.14.4-py3-none-any.whl" in wheels and "pydantic-1.0.0-py3-none-any.whl" not in wheels
    assert json.loads((out / "manifest.json").read_text()) == manifest
    assert manifest["total_bytes"] == sum(manifest["sizes"].values()) + manifest["repo_bytes"] + prepare.MARGIN
    assert not out.with_name(out.name + ".new").exists()


def test_a_stage_without_needs_gets_only_the_tree(tree, checkout, cache):
    out = checkout / ".gpu-test"
    manifest = prepare.prepare([stage("plain")], tree, out, repo=checkout, cache=cache)
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "tree.tar.xz"]
    assert "base" not in manifest and manifest["wheels"] == [] and manifest["artifacts"] == {}


def test_tilelang_is_packed_only_when_a_selected_stage_needs_it(tree, checkout, cache):
    (cache / needs.ARTIFACTS["tilelang"]).write_bytes(b"prebuilt tilelang site")
    out = checkout / ".gpu-test"
    prepare.prepare([stage("plain")], tree, out, repo=checkout, cache=cache)
    assert not (out / "tilelang-site.tar.xz").exists()
    manifest = prepare.prepare([stage("plain"), stage("tl", ("tilelang",))], tree, out, repo=checkout, cache=cache)
    assert (out / "tilelang-site.tar.xz").read_bytes() == b"prebuilt tilelang site"
    assert manifest["artifacts"] == {"tilelang": "tilelang-site.tar.xz"}


def test_another_tilelang_version_is_built_by_the_recipe_and_cached_apart(tree, checkout, cache, tmp_path):
    (cache / needs.ARTIFACTS["tilelang"]).write_bytes(b"pinned tilelang site")
    kit = tmp_path / "kit"
    kit.mkdir()
    # the recipe's interface: DIR VERSION -> DIR/tilelang-site.tar.xz
    (kit / "prepare_tilelang_carry.sh").write_text(
        'echo "$2" >> "$1/calls"; printf "tilelang %s" "$2" > "$1/tilelang-site.tar.xz"\n')
    out = checkout / ".gpu-test"
    manifest = prepare.prepare([stage("tl", ("tilelang",))], tree, out, repo=checkout, cache=cache, h200_kit=kit,
                               tilelang_version="0.1.15")
    assert (out / "tilelang-site.tar.xz").read_bytes() == b"tilelang 0.1.15"
    assert manifest["tilelang_version"] == "0.1.15"
    prepare.prepare([stage("tl", ("tilelang",))], tree, out, repo=checkout, cache=cache, h200_kit=kit,
                    tilelang_version="0.1.15")
    assert (cache / "tilelang-0.1.15" / "calls").read_text() == "0.1.15\n"  # built once
    manifest = prepare.prepare([stage("tl", ("tilelang",))], tree, out, repo=checkout, cache=cache, h200_kit=kit)
    assert (out / "tilelang-site.tar.xz").read_bytes() == b"pinned tilelang site"
    assert manifest["tilelang_version"] == needs.TILELANG_PINNED


def test_tilelang_without_cache_or_recipe_is_refused(tree, checkout, cache, tmp_path):
    with pytest.raises(prepare.PrepareError, match="prepare_tilelang_carry.sh"):
        prepare.prepare([stage("tl", ("tilelang",))], tree, checkout / ".gpu-test", repo=checkout, cache=cache,
                        h200_kit=tmp_path / "no-kit")


def test_over_the_limit_is_refused_and_the_previous_pack_kept(tree, checkout, cache):
    out = checkout / ".gpu-test"
    first = prepare.prepare([stage("plain")], tree, out, repo=checkout, cache=cache)
    limit = first["total_bytes"] + 1000  # the tree alone fits; with the wheels it does not
    with pytest.raises(prepare.PackTooLarge) as err:
        prepare.prepare([stage("big", ("vllm-sampler-deps",))], tree, out, repo=checkout, cache=cache,
                        limit_bytes=limit)
    message = str(err.value)
    assert "stages big" in message and "over the" in message and "separate packs" in message
    assert "wheels/pydantic_core-2.50.5-py3-none-any.whl" in message  # the big items are named
    assert json.loads((out / "manifest.json").read_text()) == first
    assert not (out / "wheels").exists()
    assert not out.with_name(out.name + ".new").exists()


def test_the_checkout_that_travels_counts_towards_the_limit(tree, tmp_path, cache):
    small = make_checkout(tmp_path / "small")
    fits = prepare.prepare([stage("plain")], tree, small / ".gpu-test", repo=small, cache=cache)
    big = make_checkout(tmp_path / "big", extra_bytes=300_000)
    with pytest.raises(prepare.PackTooLarge, match="repository's files"):
        prepare.prepare([stage("plain")], tree, big / ".gpu-test", repo=big, cache=cache,
                        limit_bytes=fits["total_bytes"] + 100_000)


def test_device_limit_is_64_mib_with_a_margin():
    assert prepare.DEVICE_LIMIT_MIB * prepare.MIB == 64 * 1024 * 1024
    assert prepare.MARGIN >= 1024 * 1024


def test_with_repo_packs_the_checkout_but_not_ignored_files(tree, checkout, cache):
    (checkout / "untracked.txt").write_text("new work\n")
    out = checkout / ".gpu-test"
    prepare.prepare([stage("plain")], tree, out, repo=checkout, cache=cache, with_repo=True)
    names = set(tar_members(out / "repo.tar.gz"))
    assert {"README.md", "benchmarks/gpu/README.md", "untracked.txt"} <= names
    assert not [n for n in names if n.startswith(".gpu-test")]


def test_uncommitted_tree_is_refused(tree, checkout, cache):
    (tree / "vllm" / "sampler.py").write_text("edited\n")
    with pytest.raises(prepare.PrepareError, match="uncommitted"):
        prepare.prepare([stage("plain")], tree, checkout / ".gpu-test", repo=checkout, cache=cache)
    assert not (checkout / ".gpu-test").exists()


def test_version_file_rewritten_by_the_editable_install_is_not_a_change(tree, checkout, cache):
    """`bash ci/build.sh` installs build/vllm editable, which rewrites vllm/_version.py; the
    pack still holds the committed file."""
    committed = (tree / "vllm" / "_version.py").read_text()
    (tree / "vllm" / "_version.py").write_text("__version__ = version = '9.9.9+dspark.1.empty'\n")
    pack = checkout / ".gpu-test"
    prepare.prepare([stage("plain")], tree, pack, repo=checkout, cache=cache)
    with tarfile.open(pack / "tree.tar.xz") as tar:
        assert tar.extractfile("vllm/_version.py").read().decode() == committed


def test_missing_base_tag_and_missing_tree_file_are_named(tree, checkout, cache):
    with pytest.raises(prepare.PrepareError, match="tests/v1/nope.py"):
        prepare.prepare([stage("a", (), ("tests/v1/nope.py",))], tree, checkout / ".g", repo=checkout, cache=cache)
    git(tree, "tag", "-d", "base")
    with pytest.raises(prepare.PrepareError, match="no `base` tag"):
        prepare.prepare([stage("a", ("base",))], tree, checkout / ".g", repo=checkout, cache=cache)


def test_a_folder_that_is_not_a_pack_is_not_overwritten(tree, checkout, cache):
    out = checkout / "notes"
    out.mkdir()
    (out / "mine.txt").write_text("keep me\n")
    with pytest.raises(prepare.PrepareError, match="not a pack"):
        prepare.prepare([stage("plain")], tree, out, repo=checkout, cache=cache)
    assert (out / "mine.txt").read_text() == "keep me\n"


def test_unknown_need_is_refused(tree, checkout, cache):
    with pytest.raises(prepare.PrepareError, match="unknown need"):
        prepare.prepare([stage("a", ("cuda-toolkit",))], tree, checkout / ".g", repo=checkout, cache=cache)


def test_cli_reports_refusal_with_exit_1(tree, checkout, cache, capsys, monkeypatch):
    monkeypatch.setattr(prepare, "select", lambda names: [stage("big", ("vllm-sampler-deps",))])
    rc = prepare.main(["--stages", "big", "--tree", str(tree), "--out", str(checkout / ".gpu-test"),
                       "--cache", str(cache), "--limit-mib", "0.5"])
    assert rc == 1
    assert "error: pack for stages big" in capsys.readouterr().err


def test_runner_rebuilds_the_base_tree_from_the_pack(tree, checkout, cache, tmp_path):
    out = checkout / ".gpu-test"
    stages = [stage("a", ("base",))]
    prepare.prepare(stages, tree, out, repo=checkout, cache=cache)
    logs = tmp_path / "logs"
    logs.mkdir()
    env, info = run.setup(out, tmp_path / "work", stages, logs)
    base = Path(info["base"])
    expected = tarfile.open(fileobj=io.BytesIO(git_bytes(tree, "archive", "base", "vllm")))
    want = {m.name: expected.extractfile(m).read() for m in expected if m.isfile()
            and not m.name.endswith(".so") and "/tests/" not in m.name}
    got = {str(p.relative_to(base)): p.read_bytes() for p in base.rglob("*") if p.is_file()}
    assert got == want
    assert (Path(info["tree"]) / "vllm" / "new_overlay.py").exists()
    assert (tmp_path / "work" / "site" / "vllm-9.9.9.dist-info" / "METADATA").read_text().endswith("9.9.9\n")
    assert env["PYTHONPATH"].split(":")[:2] == [str(tmp_path / "work" / "boot"), str(run.REPO)]


def git_bytes(cwd: Path, *args: str) -> bytes:
    import subprocess

    return subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True).stdout


def test_standin_discovery_keeps_only_the_seeded_packages_an_import_needed(tmp_path, monkeypatch):
    """Seeded packages (standins.KNOWN_PACKAGES) spare discovery a round each; a seeded one no
    import reaches is dropped, so the run's list names only what was stood in. Real fresh
    interpreters import a real module that lacks two packages, one seeded and one not."""
    from benchmarks.gpu import standins

    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "needs_two.py").write_text("import zz_seeded_needed\nimport zz_unseeded_missing\n")
    monkeypatch.setattr(standins, "KNOWN_PACKAGES", {"zz_seeded_needed": "t", "zz_seeded_unused": "t"})
    repo_root = Path(standins.__file__).resolve().parents[2]
    boot = tmp_path / "boot"  # the runner's sitecustomize, which installs the finder first
    boot.mkdir()
    (boot / "sitecustomize.py").write_text(run.SITECUSTOMIZE)
    monkeypatch.setenv("PYTHONPATH", f"{boot}:{mods}:{repo_root}")
    for var in ("GPU_STANDIN_COMPILED", "GPU_STANDIN_PACKAGES"):
        monkeypatch.delenv(var, raising=False)
    found = standins.discover(tmp_path / "tree", ["needs_two"])
    assert found["import_failure"] is None
    assert found["packages"] == ["zz_seeded_needed", "zz_unseeded_missing"]
    assert found["import_rounds"] == 2  # the seeded package cost no round of its own


def test_steps_run_one_stage_twice_under_their_own_names_and_environments():
    steps = run.plan(None, [["ab:tilelang_ablate", "ABLATE_ARGS=--kernel resident --variants a,b"],
                            ["tilelang_ablate", "X=1=2"], ["tests:tilelang_draft_attn"]], [])
    assert [(s.name, s.stage.name, s.env) for s in steps] == [
        ("ab", "tilelang_ablate", {"ABLATE_ARGS": "--kernel resident --variants a,b"}),
        ("tilelang_ablate", "tilelang_ablate", {"X": "1=2"}),
        ("tests", "tilelang_draft_attn", {}),
    ]
    # without --step: one step per stage, named after it; without --stages either: the pack's
    assert [(s.name, s.env) for s in run.plan("dspark,sm120", [], [])] == [("dspark", {}), ("sm120", {})]
    assert [s.name for s in run.plan(None, [], ["sm120"])] == ["sm120"]


@pytest.mark.parametrize("stages, specs, message", [
    ("dspark", [["dspark"]], "not both"),
    (None, [["a:dspark"], ["a:sm120"]], "two steps named a"),
    (None, [["dspark"], ["dspark", "X=1"]], "two steps named dspark"),
    (None, [["x:nope"]], "unknown stage(s) nope"),
    (None, [["a:dspark", "ABLATE_ARGS"]], "--step a:dspark: 'ABLATE_ARGS' is not VAR=value"),
    (None, [["a:dspark", "1X=2"]], "'1X=2' is not VAR=value"),
    (None, [["../x:dspark"]], "step names must be"),
    (None, [[f"s{i}:dspark"] for i in range(run.MAX_STEPS + 1)], "at most 6 a run"),
])
def test_bad_steps_are_refused_before_setup(stages, specs, message):
    with pytest.raises(SystemExit) as e:
        run.plan(stages, specs, [])
    assert message in str(e.value)


def test_each_step_gets_its_environment_json_and_work_folder(tmp_path, monkeypatch):
    """The runner with its machine-side parts replaced (no pack is unpacked and no stage process
    started here; the CLI parsing, the caps and the result files are the real ones): two steps of
    one stage write two result files, each stage process sees its own variables and names its
    step in its context, and --cap applies by step name before stage name."""
    pack = tmp_path / "pack"
    pack.mkdir()
    (pack / "manifest.json").write_text(json.dumps({"stages": ["tilelang_ablate"]}))
    monkeypatch.setattr(run, "setup", lambda pack, work, stages, logs: (
        {"FROM_SETUP": "1"}, {"tree": "t", "base": None, "metadata_standin": "m"}))
    monkeypatch.setattr(run, "machine", lambda env: {"gpu": "none"})
    monkeypatch.setattr(run.subprocess, "run", lambda *a, **k: type("P", (), {
        "stdout": json.dumps({"compiled_vllm_modules": [], "packages": []}), "stderr": ""})())
    seen = []

    def fake_stage_process(argv, cap, stdout, env, cwd):
        ctx = json.loads(Path(argv[-1]).read_text())
        seen.append((ctx["name"], ctx["stage"], env.get("ABLATE_ARGS"), env["FROM_SETUP"], round(cap)))
        Path(ctx["json_path"]).write_text(json.dumps({"ok": True, "args": env.get("ABLATE_ARGS")}))
        return 0

    monkeypatch.setattr(run, "run_capped", fake_stage_process)
    out = tmp_path / "out"
    rc = run.main(["--pack", str(pack), "--out", str(out), "--work", str(tmp_path / "work"), "--cap", "b=42",
                   "--step", "a:tilelang_ablate", "ABLATE_ARGS=--kernel resident",
                   "--step", "b:tilelang_ablate", "ABLATE_ARGS=--kernel plain"])
    assert rc == 0
    assert [s[:4] for s in seen] == [("a", "tilelang_ablate", "--kernel resident", "1"),
                                    ("b", "tilelang_ablate", "--kernel plain", "1")]
    assert seen[1][4] == 42 and seen[0][4] > 42  # the cap named b is b's alone
    assert json.loads((out / "a.json").read_text())["args"] == "--kernel resident"
    b = json.loads((out / "b.json").read_text())
    assert b["args"] == "--kernel plain"
    assert b["harness"]["stage"] == "tilelang_ablate" and b["harness"]["env"] == {"ABLATE_ARGS": "--kernel plain"}
    summary = json.loads((out / "summary.json").read_text())
    assert list(summary["stages"]) == ["a", "b"]
    assert sorted(p.name for p in out.iterdir()) == ["a.json", "b.json", "logs.tar.gz", "summary.json"]
