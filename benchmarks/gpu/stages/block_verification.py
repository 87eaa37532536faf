# SPDX-License-Identifier: Apache-2.0
"""block-verification group on the GPU: our CPU tests on CUDA, the sampler benchmark with its
kernel trace, the synthetic accepted-length harness, and upstream's rejection-sampler tests
on the patched tree."""

import json
import sys

from benchmarks.gpu.stage import Context, Stage

UPSTREAM_TEST = "tests/v1/spec_decode/test_rejection_sampler_utils.py"


def run(ctx: Context) -> dict:
    py = sys.executable
    steps = {}
    bench_json = ctx.work / "bench.json"  # first: the kernel trace and the timings matter most
    steps["bench"] = ctx.sh("bench", [
        py, "-m", "benchmarks.gpu.bench.block_verification", str(bench_json), str(ctx.base)], 75)
    bench = json.loads(bench_json.read_text()) if bench_json.exists() else {}
    ctx.save(steps=steps, bench=bench)
    steps["pytest_patched"] = ctx.sh("pytest_patched", [
        py, "-m", "pytest", "-q", "-rfE", "--durations=5", "tests/patched/block_verification"], 40)
    ctx.save(steps=steps)
    synth_json = ctx.work / "synthetic.json"
    device = ["--device", "cuda"] if _cuda() else []
    steps["synthetic"] = ctx.sh("synthetic", [
        py, "benchmarks/block_verification/synthetic_harness.py", *device, "--trials", "4096",
        "--json", str(synth_json)], 25)
    synthetic = json.loads(synth_json.read_text()) if synth_json.exists() else None
    ctx.save(steps=steps, synthetic=synthetic)
    test_dir = ctx.tree / UPSTREAM_TEST.rsplit("/", 1)[0]
    steps["pytest_upstream"] = ctx.sh("pytest_upstream", [
        py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "8", "-rfE", "--durations=5",
        UPSTREAM_TEST.rsplit("/", 1)[1]], 50, cwd=test_dir)
    return {"steps": steps, "ok": all(s["rc"] == 0 for s in steps.values()) and bench.get("ok", False)}


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


STAGE = Stage(
    name="block-verification",
    doc=__doc__,
    run=run,
    time_cap_s=150,
    needs=("base", "vllm-sampler-deps"),
    tree_files=(UPSTREAM_TEST,),
    imports=(
        "vllm.v1.worker.gpu.spec_decode.rejection_sampler_utils",
        "vllm.v1.worker.gpu.spec_decode.rejection_sampler",
        "vllm.v1.worker.gpu.sample.states",
        "vllm.v1.worker.gpu.sample.gumbel",
        "vllm.v1.worker.gpu.spec_decode.reference_rejection_sampler",
        "vllm.v1.worker.gpu.spec_decode.draft_logits",
    ),
)
