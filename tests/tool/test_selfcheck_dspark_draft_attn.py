# SPDX-License-Identifier: Apache-2.0
"""CPU tests of ci/selfcheck_dspark_draft_attn.py, the one command SM120 operators run: its
options answer on any machine (before tilelang, torch or vLLM are imported), a mistyped flag
is refused, nothing-to-check exits 2, and the options reach the GPU benchmark as its command
line. The GPU part itself (draft_attn_gpu) is replaced by a recorder here: it needs CUDA."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "ci" / "selfcheck_dspark_draft_attn.py"
_spec = importlib.util.spec_from_file_location("selfcheck_dspark_draft_attn", SCRIPT)
sc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sc)


def run_script(*args: str) -> subprocess.CompletedProcess:
    # -S: no site-packages, so tilelang / torch / vllm are surely absent
    return subprocess.run([sys.executable, "-S", str(SCRIPT), *args], capture_output=True, text=True, timeout=60)


def test_help_and_a_mistyped_flag_answer_without_the_gpu_stack():
    got = run_script("--help")
    assert got.returncode == 0, got.stderr
    for flag in ("--json", "--quick", "--check-only", "--sizes"):
        assert flag in got.stdout
    assert "exit status" in got.stdout
    got = run_script("--quik")
    assert got.returncode == 2
    assert "unrecognized arguments: --quik" in got.stderr
    assert "cannot check" not in got.stderr


def test_nothing_to_check_exits_2_naming_what_is_missing():
    got = run_script("--check-only")
    assert got.returncode == 2
    assert got.stderr.startswith("cannot check: No module named")


@pytest.fixture
def gpu_stack(monkeypatch):
    """tilelang, torch with a CUDA device, the patched vLLM module and a recording stand-in
    for draft_attn_gpu, as the script's imports find them; the stand-in returns `rc`."""
    stack = types.SimpleNamespace(calls=[], rc=0)
    bench = types.SimpleNamespace(main=lambda argv: stack.calls.append(argv) or stack.rc)
    stack.cuda = types.SimpleNamespace(is_available=lambda: True)
    common = "vllm.models.deepseek_v4.nvidia.ops.dspark_draft_attn_common"
    fake = {
        "tilelang": types.ModuleType("tilelang"),
        "torch": types.SimpleNamespace(cuda=stack.cuda),
        "benchmarks.dspark_draft_attn": types.SimpleNamespace(draft_attn_gpu=bench),
        "benchmarks.dspark_draft_attn.draft_attn_gpu": bench,
    }
    parts = common.split(".")
    for i in range(1, len(parts) + 1):
        fake[".".join(parts[:i])] = types.ModuleType(".".join(parts[:i]))
    fake[".".join(parts[:-1])].dspark_draft_attn_common = fake[common]
    for name, mod in fake.items():
        monkeypatch.setitem(sys.modules, name, mod)
    return stack


def test_options_become_the_benchmark_command_line(gpu_stack, monkeypatch):
    assert sc.main([]) == 0
    assert sc.main(["--check-only", "--json", "r.json"]) == 0
    assert sc.main(["--quick", "--sizes", "1x64,8x16"]) == 0
    assert gpu_stack.calls == [
        ["all"],
        ["check", "--json", "r.json"],
        ["all", "--quick", "--sizes", "1x64,8x16"],
    ]
    monkeypatch.setattr(gpu_stack.cuda, "is_available", lambda: False)
    assert sc.main([]) == 2 and len(gpu_stack.calls) == 3


def test_a_wrong_result_is_the_scripts_exit_status(gpu_stack):
    """The script adds no verdict of its own: draft_attn_gpu's 1 (a wrong result) is its 1."""
    gpu_stack.rc = 1
    assert sc.main(["--quick"]) == 1


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v"]))
