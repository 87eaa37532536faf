# SPDX-License-Identifier: Apache-2.0
"""dspark GPU micro-benchmarks, patched vs unpatched in the same run.

1. _flatten_sampled_kernel: the vectorised kernel (dspark/0003) against vLLM
   0.34.0's scalar loop (loaded from the base tree), device time per launch from
   CUDA-graph replays of 100 launches (launch overhead excluded), interleaved
   rounds, the scalar kernel timed twice for the A-vs-A control.
2. VLLM_DSPARK_TIMING host cost: microseconds of host time per step spent in
   the collector's calls with real CUDA events, on (log interval 500) and off,
   interleaved, min and median of several repetitions.

Usage: python -m benchmarks.gpu.bench.dspark OUT.json BASE_TREE
"""

import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import triton
from vllm.v1.worker.gpu import async_utils
from vllm.v1.worker.gpu.spec_decode.rejection_sampler import (
    _flatten_sampled_kernel as vectorised,
)

from benchmarks.gpu import timing


def _load_base(rel: str, name: str):
    path = Path(sys.argv[2]) / rel
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _flatten_inputs(num_reqs: int, num_cols: int):
    g = torch.Generator(device="cuda").manual_seed(num_reqs * 31 + num_cols)
    sampled = torch.randint(0, 129280, (num_reqs, num_cols), device="cuda", generator=g)
    num_sampled = torch.randint(
        0, num_cols + 1, (num_reqs,), device="cuda", generator=g, dtype=torch.int32
    )
    cu = torch.zeros(num_reqs + 1, dtype=torch.int32, device="cuda")
    cu[1:] = torch.arange(1, num_reqs + 1, device="cuda") * num_cols
    flat = torch.zeros(num_reqs * num_cols, dtype=sampled.dtype, device="cuda")
    return flat, sampled, num_sampled, cu


def _launcher(kernel, args, vector: bool):
    flat, sampled, num_sampled, cu = args
    kwargs = {"num_warps": 1}
    if vector:
        kwargs["BLOCK_SIZE"] = triton.next_power_of_2(sampled.shape[1])

    def launch():
        kernel[(sampled.shape[0],)](
            flat, sampled, sampled.stride(0), num_sampled, cu, **kwargs
        )

    return launch


def bench_flatten(scalar) -> list[dict]:
    rows = []
    for num_cols in (6, 8):  # num_speculative_steps 5 and 7
        for num_reqs in (1, 8, 64, 256, 1024):
            args = _flatten_inputs(num_reqs, num_cols)
            ref = args[0].clone()
            _launcher(scalar, (ref, *args[1:]), False)()
            _launcher(vectorised, args, True)()
            torch.cuda.synchronize()
            assert torch.equal(ref, args[0])
            t = timing.compare({"scalar": _launcher(scalar, args, False),
                                "vectorised": _launcher(vectorised, args, True)},
                               control="scalar", rounds=30, inner=100, graphs=True)
            row = {"num_speculative_steps": num_cols - 1, "num_reqs": num_reqs,
                   "us_per_launch": t["variants"], "timing": {k: t[k] for k in ("mode", "rounds", "inner")},
                   "scalar_over_vectorised": timing.ratio(t, "scalar", "vectorised")}
            rows.append(row)
            print(json.dumps({k: row[k] for k in ("num_speculative_steps", "num_reqs", "scalar_over_vectorised")}),
                  flush=True)
    return rows


def bench_timing_overhead(steps: int = 2000, reps: int = 7) -> dict:
    samples = {"off": [], "on": []}
    for _ in range(reps):
        for name, interval in (("off", 0), ("on", 500)):
            collector = async_utils.StepTimingCollector(log_interval=interval)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(steps):
                collector.forward_start()
                collector.forward_end()
                collector.drafter_start()
                collector.draft_forward_start()
                collector.draft_forward_end()
                collector.drafter_end()
            samples[name].append((time.perf_counter() - t0) * 1e6 / steps)
            torch.cuda.synchronize()
    out = {f"host_us_per_step_{n}": {"min": round(min(s), 2), "median": round(statistics.median(s), 2)}
           for n, s in samples.items()}
    print(json.dumps(out), flush=True)
    return out


def main(out_path: str) -> int:
    scalar = _load_base("vllm/v1/worker/gpu/spec_decode/rejection_sampler.py",
                        "_base_rejection")._flatten_sampled_kernel
    result = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "flatten": bench_flatten(scalar),
    }
    Path(out_path).write_text(json.dumps(result, indent=1))
    result["timing_overhead"] = bench_timing_overhead()
    Path(out_path).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
