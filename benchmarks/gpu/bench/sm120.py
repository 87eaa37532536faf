# SPDX-License-Identifier: Apache-2.0
"""Run ci/selfcheck_fp8.py on a machine with vLLM's Python package and no compiled ops
(the sm120 stage; _C capability queries come from benchmarks/gpu/standins.py), plus two
checks the tool itself does not make:

- ``--direct``: vLLM's Triton block-FP8 GEMM called directly
  (fp8_utils.w8a8_triton_block_scaled_mm) with E8M0 and with fp32 weight
  scales, without a VllmConfig, so something is measured even if the tool
  cannot set vLLM up here;
- ``--inject-wrong``: the tool's report with one extra backend that is vLLM's
  Triton kernel fed one wrong 128x128 block scale, which must come out WRONG.

Usage: python -m benchmarks.gpu.bench.sm120 [selfcheck args] [--direct OUT.json]
[--inject-wrong]
"""

import importlib.util
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[3]

spec = importlib.util.spec_from_file_location(
    "selfcheck_fp8", ROOT / "ci" / "selfcheck_fp8.py"
)
sc = importlib.util.module_from_spec(spec)
sys.modules["selfcheck_fp8"] = sc
spec.loader.exec_module(sc)


def quantize_act(x):
    """Per-token 1x128 FP8 quantisation (fp32 scales), as vLLM's QuantFP8."""
    m, k = x.shape
    g = x.float().view(m, k // 128, 128)
    s = g.abs().amax(-1, keepdim=True).clamp(min=1e-10) / 448.0
    q = (g / s).clamp(-448, 448).to(torch.float8_e4m3fn).view(m, k)
    return q, s.view(m, k // 128).contiguous()


def direct(out_path):
    from vllm.model_executor.layers.quantization.utils.fp8_utils import (
        w8a8_triton_block_scaled_mm,
    )

    rows = []
    for name, n, k in sc.DSV4_FLASH_SHAPES:
        for m in (1, 6, 64, 512):
            for scales in ("e8m0", "fp32"):
                p = sc.make_problem(name, m, n, k, scales=scales, device="cuda")
                a, a_s = quantize_act(p.x)
                t = time.perf_counter()
                try:
                    out = w8a8_triton_block_scaled_mm(
                        a, p.weight, a_s, p.weight_scale, [128, 128], torch.bfloat16
                    )
                    torch.cuda.synchronize()
                    mt = sc.compare(out, p.reference())
                    row = dict(
                        p.describe(),
                        status="ok"
                        if mt.ok(sc.DEFAULT_TOL, sc.DEFAULT_TOL_MAX)
                        else "wrong",
                        rel_fro=mt.rel_fro,
                        rel_band=mt.rel_band,
                        rel_max=mt.rel_max,
                        nonfinite=mt.nonfinite,
                    )
                except Exception as e:  # noqa: BLE001
                    row = dict(
                        p.describe(), status="error", error=f"{type(e).__name__}: {e}"
                    )
                row["seconds"] = round(time.perf_counter() - t, 3)
                rows.append(row)
                print("direct", row, flush=True)
    Path(out_path).write_text(json.dumps(rows, indent=1) + "\n")
    bad = [r for r in rows if r["status"] != "ok"]
    print(f"direct Triton: {len(rows) - len(bad)}/{len(rows)} ok", flush=True)
    return 1 if bad else 0


class WrongBlockScale:
    """vLLM's Triton kernel, given one wrong block scale (exponent + 1)."""

    def __init__(self, inner):
        self.inner = inner
        self.name = "INJECTED_WRONG_BLOCK_SCALE(" + inner.name + ")"

    def probe(self, problem):
        return self.inner.probe(problem)

    def run(self, problem):
        exp = problem.scale_exp.clone()
        exp[exp.shape[0] // 2, exp.shape[1] // 2] += 1
        bad = sc.Problem(**{**problem.__dict__, "scale_exp": exp})
        return self.inner.run(bad)


def main():
    argv = sys.argv[1:]
    if "--direct" in argv:
        i = argv.index("--direct")
        return direct(argv[i + 1])
    inject = "--inject-wrong" in argv
    argv = [a for a in argv if a != "--inject-wrong"]
    if not inject:
        return sc.main(argv)
    # Build vLLM's backends the way sc.main does, then add the wrong one.
    api = sc.load_vllm_api()
    with sc.vllm_context("deepseek_v4"):
        backends = [sc.VllmKernelBackend(k, api) for k in api.kernels]
        triton = next(b for b in backends if b.name == "TritonFp8BlockScaledMMKernel")
        picked = {name: sc.vllm_pick(api, n, k) for name, n, k in sc.DSV4_FLASH_SHAPES}
        return sc.main(argv, backends=[triton, WrongBlockScale(triton)], picked=picked)


if __name__ == "__main__":
    sys.exit(main())
