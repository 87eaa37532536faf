"""ci/build_wheel.py, ci/smoke_wheel.py, ci/upstream_tests.py on tiny wheels and trees (no downloads)."""

from __future__ import annotations

import base64
import hashlib
import subprocess
import zipfile
from pathlib import Path

import build_wheel
import common
import pytest
import smoke_wheel
import upstream_tests
from common import CIError

ROOT = Path(__file__).resolve().parents[2]

UPSTREAM_NAME = "vllm-0.34.0-cp38-abi3-manylinux_2_28_x86_64.whl"


def make_wheel(path: Path, version: str, files: dict[str, bytes], tag: str = "cp311-cp311-linux_x86_64",
               purelib: bool = False) -> Path:
    """A minimal valid wheel (WHEEL, METADATA, RECORD) holding ``files``."""
    info = f"vllm-{version}.dist-info"
    members = dict(files)
    members[f"{info}/WHEEL"] = (f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: {str(purelib).lower()}\n"
                                f"Tag: {tag}\n\n").encode()
    members[f"{info}/METADATA"] = (f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n"
                                   "Requires-Dist: numpy\n").encode()
    record = [f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()},{len(d)}"
              for n, d in members.items()]
    members[f"{info}/RECORD"] = ("\n".join(record + [f"{info}/RECORD,,"]) + "\n").encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    return path


# --- tags and checks -----------------------------------------------------------------------------------

def test_retag_to_upstreams_platform_and_abi_tags(tmp_path):
    raw = make_wheel(tmp_path / "raw" / "vllm-0.34.0+dspark.1-cp311-cp311-linux_x86_64.whl", "0.34.0+dspark.1",
                     {"vllm/__init__.py": b"", "vllm/_C.abi3.so": b"\x7fELF"})
    tags = common.filename_tags(Path(UPSTREAM_NAME))
    assert tags == ["cp38-abi3-manylinux_2_28_x86_64"]
    out = build_wheel.retag(raw, tags, purelib=False, out_dir=tmp_path / "dist")
    assert out.name == "vllm-0.34.0+dspark.1-cp38-abi3-manylinux_2_28_x86_64.whl"
    assert common.wheel_tags(out) == tags
    with zipfile.ZipFile(out) as z:
        assert "Root-Is-Purelib: false" in z.read("vllm-0.34.0+dspark.1.dist-info/WHEEL").decode()
        assert z.read("vllm/_C.abi3.so") == b"\x7fELF"


def test_python_only_wheel_is_retagged_pure(tmp_path):
    raw = make_wheel(tmp_path / "raw" / "vllm-0.34.0+dspark.1.empty-cp311-cp311-linux_x86_64.whl",
                     "0.34.0+dspark.1.empty", {"vllm/__init__.py": b""})
    out = build_wheel.retag(raw, [build_wheel.PURE_TAG], purelib=True, out_dir=tmp_path / "dist")
    assert out.name == "vllm-0.34.0+dspark.1.empty-py3-none-any.whl"
    with zipfile.ZipFile(out) as z:
        assert "Root-Is-Purelib: true" in z.read("vllm-0.34.0+dspark.1.empty.dist-info/WHEEL").decode()


def test_binaries_must_be_upstreams_byte_for_byte(tmp_path):
    upstream = make_wheel(tmp_path / "up" / UPSTREAM_NAME, "0.34.0",
                          {"vllm/_C.abi3.so": b"A", "vllm/vllm-rs": b"B", "vllm/x.py": b""})
    same = make_wheel(tmp_path / "a" / "w.whl", "0.34.0+dspark.1", {"vllm/_C.abi3.so": b"A", "vllm/vllm-rs": b"B"})
    assert build_wheel.check_binaries(same, upstream)["identical_to_upstream"]
    rebuilt = make_wheel(tmp_path / "b" / "w.whl", "0.34.0+dspark.1", {"vllm/_C.abi3.so": b"A2"})
    with pytest.raises(CIError, match="differs"):
        build_wheel.check_binaries(rebuilt, upstream)
    foreign = make_wheel(tmp_path / "c" / "w.whl", "0.34.0+dspark.1", {"vllm/_new.abi3.so": b"N"})
    with pytest.raises(CIError, match="not upstream's"):
        build_wheel.check_binaries(foreign, upstream)
    empty = make_wheel(tmp_path / "d" / "w.whl", "0.34.0+dspark.1", {"vllm/x.py": b""})
    with pytest.raises(CIError, match="no binaries"):
        build_wheel.check_binaries(empty, upstream)


def test_exact_pins_the_index_lacks_are_found():
    index = {"flashinfer-python": {"0.7.2", "0.7.4"}, "torch": {"2.14.0", "2.13.0"}}
    reqs = ["flashinfer-python==0.7.3", "torch==2.14.0", "numpy>=1.26", "mac-only==1.0; sys_platform == 'darwin'",
            "extra-only==9; extra == 'bench'", "gone==1.0; platform_machine == 'x86_64'"]
    missing = build_wheel.unavailable_pins(reqs, versions_of=lambda name: index.get(name, set()))
    assert missing == ["flashinfer-python==0.7.3", 'gone==1.0; platform_machine == "x86_64"']


def test_sha256sums_lists_each_wheel_once(tmp_path):
    w = tmp_path / "vllm-1-py3-none-any.whl"
    w.write_bytes(b"one")
    build_wheel.sha256sums(tmp_path, w)
    w.write_bytes(b"two")
    sums = build_wheel.sha256sums(tmp_path, w).read_text().splitlines()
    assert sums == [f"{hashlib.sha256(b'two').hexdigest()}  {w.name}"]


# --- smoke test ----------------------------------------------------------------------------------------

def git(cwd: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin:/usr/local/bin", "HOME": str(cwd)}
    return subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True, text=True,
                          env=env).stdout


@pytest.fixture
def patched_tree(tmp_path):
    """A tree like tools/apply.py makes: tag `base`, then one commit changing vllm/sampler.py."""
    tree = tmp_path / "tree"
    (tree / "vllm").mkdir(parents=True)
    (tree / "vllm" / "__init__.py").write_text("__version__ = '0'\n")
    (tree / "vllm" / "sampler.py").write_text("def sample():\n    return 'upstream'\n")
    git(tree, "init", "-q")
    git(tree, "add", "-A")
    git(tree, "commit", "-qm", "base")
    git(tree, "tag", "base")
    (tree / "vllm" / "sampler.py").write_text("def sample():\n    return 'patched'\n")
    git(tree, "commit", "-qam", "[Spec Decode] patch")
    return tree


def test_patched_files_are_those_changed_above_base(patched_tree):
    files = smoke_wheel.patched_files(patched_tree)
    assert files == {"vllm/sampler.py": hashlib.sha256(b"def sample():\n    return 'patched'\n").hexdigest()}


def test_smoke_installs_into_a_fresh_venv_and_checks_the_patched_file(tmp_path, patched_tree):
    version = "0.34.0+dspark.1.empty"
    init = f"__version__ = '{version}'\n".encode()
    good = make_wheel(tmp_path / "good" / f"vllm-{version}-py3-none-any.whl", version,
                      {"vllm/__init__.py": init, "vllm/sampler.py": b"def sample():\n    return 'patched'\n"},
                      tag="py3-none-any", purelib=True)
    result = smoke_wheel.smoke(good, patched_tree)
    assert result["version"] == version and result["patched_files"] == ["vllm/sampler.py"]
    assert "vllm-smoke-" in result["file"]
    stale = make_wheel(tmp_path / "stale" / f"vllm-{version}-py3-none-any.whl", version,
                       {"vllm/__init__.py": init, "vllm/sampler.py": b"def sample():\n    return 'upstream'\n"},
                       tag="py3-none-any", purelib=True)
    with pytest.raises(CIError, match="differs from the patched tree"):
        smoke_wheel.smoke(stale, patched_tree)


def test_smoke_skips_a_module_guarded_by_another_targets_package(tmp_path, patched_tree):
    """A kernel module that needs a CUDA-only package (tilelang, from requirements/cuda.txt)
    raises vLLM's own ImportError in a CPU wheel's venv: skipped with the reason. Any other
    ImportError stays a problem."""
    version = "0.34.0+dspark.1.empty"
    init = f"__version__ = '{version}'\n".encode()
    guard = b"raise ImportError('nopkgxyz is required for this kernel but is not installed.')\n"
    (patched_tree / "requirements").mkdir()
    (patched_tree / "requirements" / "cuda.txt").write_text("nopkgxyz==0.1.12  # the kernels' JIT\n")
    (patched_tree / "vllm" / "kernel.py").write_bytes(guard)
    git(patched_tree, "add", "-A")
    git(patched_tree, "commit", "-qm", "[Kernel] guarded")
    files = {"vllm/__init__.py": init, "vllm/sampler.py": b"def sample():\n    return 'patched'\n",
             "vllm/kernel.py": guard}
    wheel = make_wheel(tmp_path / "w" / f"vllm-{version}-py3-none-any.whl", version, files,
                       tag="py3-none-any", purelib=True)
    result = smoke_wheel.smoke(wheel, patched_tree)
    assert any("needs nopkgxyz (another target's requirement)" in s for s in result["skipped"])
    (patched_tree / "requirements" / "cuda.txt").write_text("\n")  # no longer another target's package
    with pytest.raises(CIError, match="ImportError: nopkgxyz is required"):
        smoke_wheel.smoke(wheel, patched_tree)


# --- upstream test selection ---------------------------------------------------------------------------

def test_import_detection():
    mod = "vllm.v1.worker.gpu.spec_decode.rejection_sampler"
    assert upstream_tests.imports_module(f"from {mod} import RejectionSampler\n", mod)
    assert upstream_tests.imports_module(f"import {mod} as rs\n", mod)
    assert upstream_tests.imports_module("from vllm.v1.worker.gpu.spec_decode import (\n    x,\n"
                                         "    rejection_sampler,\n)\n", mod)
    assert not upstream_tests.imports_module(f"from {mod}_utils import f\n", mod)
    assert not upstream_tests.imports_module("from vllm.v1.worker.gpu.spec_decode import rejection_sampler_utils\n",
                                             mod)


def test_selection_runs_classified_cpu_tests_of_touched_modules(tmp_path):
    tree = tmp_path / "tree"
    for rel, text in {"tests/a/test_sampler.py": "from vllm.sampler import f\n",
                      "tests/a/test_gpu.py": "import vllm.sampler\n",
                      "tests/a/test_new.py": "from vllm import sampler\n",
                      "tests/a/test_other.py": "import vllm.other\n",
                      "tests/a/test_always.py": "import vllm.unrelated\n"}.items():
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_text(text)
    config = {"cpu": [{"path": "tests/a/test_sampler.py", "tests": ["tests/a/test_sampler.py::test_one"]},
                      {"path": "tests/a/test_other.py"},
                      {"path": "tests/a/test_always.py", "always": True}],
              "not-cpu": [{"path": "tests/a/test_gpu.py", "reason": "CUDA"}]}
    sel = upstream_tests.select(tree, config, touched=["vllm/sampler.py"])
    assert sel.run == ["tests/a/test_sampler.py::test_one", "tests/a/test_always.py"]
    assert sel.not_cpu == {"tests/a/test_gpu.py": "CUDA"}
    assert sel.unclassified == {"tests/a/test_new.py": ["vllm.sampler"]}


def test_the_shipped_selection_file_parses():
    config = upstream_tests.load_config()
    assert {e["path"] for e in config["cpu"] if e.get("always")} >= {
        "tests/v1/worker/test_dspark_utils.py", "tests/v1/spec_decode/test_dspark_topk.py"}
