# SPDX-License-Identifier: Apache-2.0
"""dspark group on the GPU: tests/patched/dspark on CUDA against the real patched tree (the
prepare-inputs kernel also against the unpatched kernel of the base tree), and the flatten
and step-timing micro-benchmarks, patched vs base in the same run."""

import json
import sys

from benchmarks.gpu.stage import Context, Stage


def run(ctx: Context) -> dict:
    import torch

    py = sys.executable
    steps = {}
    bench = "skipped: no CUDA"
    if torch.cuda.is_available():
        bench_json = ctx.work / "bench.json"
        steps["bench"] = ctx.sh("bench", [py, "-m", "benchmarks.gpu.bench.dspark", str(bench_json), str(ctx.base)],
                                45)
        bench = json.loads(bench_json.read_text()) if bench_json.exists() else {}
        ctx.save(steps=steps, bench=bench)
    steps["pytest_patched"] = ctx.sh("pytest_patched", [
        py, "-m", "pytest", "-v", "-rfEs", "--durations=5", "tests/patched/dspark"], 60,
        env={"DSPARK_BASE_TREE": str(ctx.base)})
    return {"steps": steps, "bench": bench, "ok": all(s["rc"] == 0 for s in steps.values())}


STAGE = Stage(
    name="dspark",
    doc=__doc__,
    run=run,
    # 2026-12-03: bench 28 s, pytest 24 s (vLLM import included); 60 s cut pytest short
    time_cap_s=120,
    needs=("base", "vllm-sampler-deps", "vllm-config-deps"),
    imports=(
        "vllm.v1.worker.gpu.spec_decode.dflash.speculator",
        "vllm.v1.worker.gpu.spec_decode.dspark.speculator",
        "vllm.v1.worker.gpu.spec_decode.rejection_sampler",
        "vllm.v1.worker.gpu.async_utils",
    ),
)
