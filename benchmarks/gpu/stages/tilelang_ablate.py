# SPDX-License-Identifier: Apache-2.0
"""tilelang group, kernel work: where the draft-attention kernel's time goes.

benchmarks/dspark_draft_attn/ablate.py on the patched tree's kernel: variants with the GEMMs,
the softmax reductions, the dequantisation or the DRAM gather cut out, timed in CUDA graphs at
R=1 and R=256 beside the whole kernel and the whole kernel with every length 0, plus the kernel
list of one call. ABLATE_ARGS="--kernel resident" ablates the KV-resident kernel instead (the
output from registers, no Q trip between passes, no output stores, no GEMMs, no softmax
reductions; R = 8, 132 and 256, graph hot and cold). Not a check (the variants compute wrong
results by construction); run it when tuning the kernel. Nothing here is an SM120 result.
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
    out = ctx.work / "ablate.json"
    cmd = [sys.executable, "-m", "benchmarks.dspark_draft_attn.ablate", "--json", str(out)]
    steps = {"ablate": ctx.sh("ablate", cmd + shlex.split(os.environ.get("ABLATE_ARGS", "")), ctx.left() - 5)}
    result = json.loads(out.read_text()) if out.exists() else {}
    return {"steps": steps, "ablate": result, "ok": steps["ablate"]["rc"] == 0}


STAGE = Stage(
    name="tilelang_ablate",
    doc=__doc__,
    run=run,
    time_cap_s=300,
    needs=("tilelang", "vllm-sampler-deps"),
    imports=("vllm.v1.attention.backends.mla.sparse_swa", "tilelang"),
)
