# SPDX-License-Identifier: Apache-2.0
"""tilelang group, kernel work: where a CTA of the draft-attention kernel spends its time.

benchmarks/dspark_draft_attn/timeline.py on the patched tree's kernel: a stamped copy of the
plain kernel writes clock64 at named points (lens / index reads, prologue, per KV tile:
gathered, dequantised, S = QK^T, softmax; after the loop, the split's stores and cluster
barrier, end), one launch per case with L2 hot and cold (timeline.cases: unsplit at R = 256,
and at R = 1 the split over 3 CTAs with 64-token tiles against 6 with 32-token ones).
TIMELINE_ARGS="--kernel resident" stamps the KV-resident kernel instead (per pass: Q ready,
each tile, the sink, the output stores; R = 8, 132 and 256 at 64 and 16 heads). Not a check
(the stamps perturb the kernel a little); run it when tuning. Nothing here is an SM120 result.
"""

import json
import os
import shlex
import sys

from benchmarks.gpu.stage import Context, Stage


def run(ctx: Context) -> dict:
    import torch

    if not torch.cuda.is_available():
        return {"ok": True, "skipped": "no CUDA"}
    out = ctx.work / "timeline.json"
    cmd = [sys.executable, "-m", "benchmarks.dspark_draft_attn.timeline", "--json", str(out)]
    steps = {"timeline": ctx.sh("timeline", cmd + shlex.split(os.environ.get("TIMELINE_ARGS", "")), ctx.left() - 5)}
    result = json.loads(out.read_text()) if out.exists() else {}
    return {"steps": steps, "timeline": result, "ok": steps["timeline"]["rc"] == 0}


STAGE = Stage(
    name="tilelang_timeline",
    doc=__doc__,
    run=run,
    time_cap_s=240,
    needs=("tilelang", "vllm-sampler-deps"),
    imports=("vllm.v1.attention.backends.mla.sparse_swa", "tilelang"),
)
