# SPDX-License-Identifier: Apache-2.0
"""tilelang group on the GPU: the DSpark draft-attention TileLang kernel of the patched tree.

Correctness matrix against the fp32 reference (R x heads x N, short contexts, block-edge
windows, non-contiguous block tables, padding rows, clamped seq_len, sinks large / small /
-inf, fp8 zeros and subnormals, bitwise repeatability, CUDA-graph capture + rewrite +
replay; indices from upstream's DSpark index kernel; the SM12x tile configuration run here
too), then the benchmark (TileLang vs upstream's Triton DSV4 sparse decode vs torch, per
layer cold L2 and per draft step of 3 layers in one CUDA graph, beside the byte floor, with
an A-vs-A control), the tile-shape sweep, then tests/patched/tilelang on CUDA. Nothing here is
an SM120 result.
"""

import json
import os
import shlex
import sys

from benchmarks.gpu.stage import Context, Stage


def run(ctx: Context) -> dict:
    import torch

    py = sys.executable

    def draft_attn(what: str, out) -> list[str]:
        return [py, "-m", "benchmarks.dspark_draft_attn.draft_attn_gpu", what, "--json", str(out)]

    steps = {}
    result: dict = {}
    # kernel work on a short device budget: DRAFT_ATTN_WHAT=sweep DRAFT_ATTN_ARGS="--configs 0,5"
    # runs only that part of draft_attn_gpu (no smoke, no pytest), DRAFT_ATTN_WHAT=pytest only
    # tests/patched/tilelang; the stage then does not pass
    what = os.environ.get("DRAFT_ATTN_WHAT", "all")
    if what not in ("all", "pytest") and torch.cuda.is_available():
        out = ctx.work / "draft_attn.json"
        steps[what] = ctx.sh(
            what, draft_attn(what, out) + shlex.split(os.environ.get("DRAFT_ATTN_ARGS", "")), ctx.left() - 5
        )
        result = json.loads(out.read_text()) if out.exists() else {}
        return {"steps": steps, "draft_attn": result, "ok": False, "partial": what}
    if what == "all" and torch.cuda.is_available():
        out = ctx.work / "draft_attn.json"
        smoke = ctx.work / "smoke.json"
        # one compile (~40 s) and two small cases first, capped: a kernel that hangs costs
        # this cap instead of the stage's
        steps["smoke"] = ctx.sh("smoke", draft_attn("smoke", smoke), 150)
        result["smoke"] = json.loads(smoke.read_text()).get("smoke") if smoke.exists() else None
        if steps["smoke"]["rc"] != 0:
            ctx.save(steps=steps, draft_attn=result)
            return {"steps": steps, "draft_attn": result, "ok": False}
        steps["check_and_bench"] = ctx.sh(
            "check_and_bench",
            # DRAFT_ATTN_ARGS here too: "--configs" narrows the sweep
            draft_attn("all", out) + shlex.split(os.environ.get("DRAFT_ATTN_ARGS", "")),
            # what is left goes to pytest: its GPU tests compile kernels (75 s in run 25)
            ctx.left() - 120,
        )
        result |= json.loads(out.read_text()) if out.exists() else {}
        ctx.save(steps=steps, draft_attn=result)
    # DRAFT_ATTN_PYTEST_K: a pytest -k expression, for a short device budget (the whole
    # directory takes ~200 s there); the stage then does not pass
    select = os.environ.get("DRAFT_ATTN_PYTEST_K", "")
    steps["pytest_patched"] = ctx.sh(
        "pytest_patched",
        [py, "-m", "pytest", "-v", "-rfEs", "--durations=5", "tests/patched/tilelang"]
        + (["-k", select] if select else []),
        max(60, ctx.left() - 5),
    )
    if what == "pytest":
        return {"steps": steps, "draft_attn": result, "ok": False, "partial": what}
    ok = all(s["rc"] == 0 for s in steps.values()) and bool(result.get("correctness", {}).get("ok"))
    if select:
        return {"steps": steps, "draft_attn": result, "ok": False, "partial": f"pytest -k {select!r}"}
    return {"steps": steps, "draft_attn": result, "ok": ok}


STAGE = Stage(
    name="tilelang_draft_attn",
    doc=__doc__,
    run=run,
    time_cap_s=500,
    # not vllm-config-deps: its apache-tvm-ffi wheel would clash with the one tilelang brings
    needs=("tilelang", "vllm-sampler-deps"),
    # the CPU tests compare the reference with upstream's eager one, read from this file
    tree_files=("tests/kernels/test_deepseek_v4_cpu_kernels.py",),
    imports=(
        "vllm.v1.attention.backends.mla.sparse_swa",
        "vllm.v1.attention.ops.rocm_aiter_mla_sparse",
        # the kernel modules come in bare (draft_attn_gpu.import_without_model_package)
        "tilelang",
    ),
)
