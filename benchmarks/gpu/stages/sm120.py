# SPDX-License-Identifier: Apache-2.0
"""sm120 group on the GPU: the FP8 self-check (ci/selfcheck_fp8.py) as far as an H200 without
vLLM's compiled ops allows. This is an SM90 machine: it validates the tool and vLLM's Triton
block-FP8 path, nothing on SM120.

  B       the tool with Marlin and Humming disabled, full default set (exit 0)
  C       the tool with an injected wrong backend, which must come out WRONG (exit 1)
  direct  vLLM's Triton block-FP8 GEMM called directly, E8M0 and fp32 weight scales
  A       the tool, default environment, --quick (vLLM picks Marlin here, which this build
          lacks: exit 1 is the right verdict, recorded, not required)
"""

import json
import sys
from collections import Counter

from benchmarks.gpu.stage import Context, Stage

BENCH = "benchmarks.gpu.bench.sm120"


def _summary(path):
    """The verdict of a report, counts per backend and status (the full report is in logs.tar.gz)."""
    try:
        report = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if isinstance(report, list):  # --direct rows
        bands = [r["rel_band"] for r in report if r.get("rel_band") is not None]
        return {"status": Counter(r["status"] for r in report), "worst_rel_band": max(bands, default=None)}
    backends = {}
    for b in report.get("backends", []):
        counts = Counter(r.get("status") for r in b.get("results", []))
        bands = [r["rel_band"] for r in b.get("results", []) if r.get("rel_band") is not None]
        backends[b["name"]] = {"status": counts, "worst_rel_band": max(bands, default=None)}
    return {"verdict": report.get("verdict"), "exit_code": report.get("exit_code"),
            "vllm_pick": report.get("vllm_pick"), "problems": report.get("problems"), "backends": backends}


def run(ctx: Context) -> dict:
    import torch

    if not torch.cuda.is_available():
        return {"ok": True, "skipped": "no CUDA: the self-check's CPU side is tests/tool/test_selfcheck_fp8.py"}
    py = sys.executable
    w = ctx.work
    # caps: each run imports vLLM afresh (~20 s on the H200); 2026-12-03 B took 45 s, C was cut at 25 s
    runs = {  # (argv, env, expected exit code or None, cap s), most telling first; A's verdict is known
        "B_full": ([py, "-m", BENCH, "--json", str(w / "B_full.json")],
                   {"VLLM_DISABLED_KERNELS": "MarlinFP8ScaledMMLinearKernel,HummingFP8ScaledMMLinearKernel"}, 0, 70),
        "C_inject_wrong": ([py, "-m", BENCH, "--inject-wrong", "--quick", "--m", "64", "--scales", "e8m0",
                            "--json", str(w / "C_inject_wrong.json")], {}, 1, 45),
        "direct": ([py, "-m", BENCH, "--direct", str(w / "direct.json")], {}, 0, 45),
        "A_default_quick": ([py, "-m", BENCH, "--quick", "--json", str(w / "A_default_quick.json")], {}, None, 45),
    }
    steps, reports = {}, {}
    for name, (argv, env, expect, cap) in runs.items():
        if ctx.left() < 15:
            steps[name] = {"rc": "not run: stage budget spent", "expected_rc": expect}
            continue
        steps[name] = ctx.sh(name, argv, cap, env=env)
        steps[name]["expected_rc"] = expect
        reports[name] = _summary(w / f"{name}.json")
        ctx.save(steps=steps, reports=reports)
    ok = all(s["expected_rc"] is None or s["rc"] == s["expected_rc"] for s in steps.values())
    return {"steps": steps, "reports": reports, "ok": ok}


STAGE = Stage(
    name="sm120",
    doc=__doc__,
    run=run,
    time_cap_s=220,
    needs=("vllm-sampler-deps", "vllm-config-deps"),
    imports=("vllm.model_executor.kernels.linear", "vllm.config",
             "vllm.model_executor.layers.quantization.utils.fp8_utils"),
)
