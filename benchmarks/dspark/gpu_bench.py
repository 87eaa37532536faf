# SPDX-License-Identifier: Apache-2.0
"""dspark GPU micro-benchmarks, patched vs unpatched in the same run.

1. _flatten_sampled_kernel: the vectorised kernel (dspark/0003) against vLLM
   0.34.0's scalar loop, device time per launch, from CUDA graphs of 100
   launches (launch overhead excluded) and from eager back-to-back launches.
2. VLLM_DSPARK_TIMING host cost: microseconds of host time per step spent in
   the collector's calls with real CUDA events, on (log interval 500) and off.

Needs the kernel minitrees of benchmarks/dspark/make_kernel_minitree.py:
PYTHONPATH=<patched minitree>, DSPARK_BASE_TREE=<unpatched minitree>.
Usage: python gpu_bench.py OUT.json
"""

import importlib.util
import json
import os
import statistics
import sys
import time

import torch
import triton
from vllm.v1.worker.gpu import async_utils
from vllm.v1.worker.gpu.spec_decode.rejection_sampler import (
    _flatten_sampled_kernel as vectorised,
)


def _load_base(rel: str, name: str):
    path = os.path.join(os.environ["DSPARK_BASE_TREE"], rel)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


scalar = _load_base(
    "vllm/v1/worker/gpu/spec_decode/rejection_sampler.py", "_base_rejection"
)._flatten_sampled_kernel


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


def _graph_us_per_launch(launch, launches=100, replays=30) -> float:
    launch()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(launches):
            launch()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000 / launches)
    return statistics.median(times)


def _eager_us_per_launch(launch, launches=200, reps=5) -> float:
    launch()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
        start.record()
        for _ in range(launches):
            launch()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000 / launches)
    return statistics.median(times)


def bench_flatten() -> list[dict]:
    rows = []
    for num_cols in (6, 8):  # num_speculative_steps 5 and 7
        for num_reqs in (1, 8, 64, 256, 1024):
            args = _flatten_inputs(num_reqs, num_cols)
            ref = args[0].clone()
            _launcher(scalar, (ref, *args[1:]), False)()
            _launcher(vectorised, args, True)()
            torch.cuda.synchronize()
            assert torch.equal(ref, args[0])
            row = {"num_speculative_steps": num_cols - 1, "num_reqs": num_reqs}
            for mode, fn in (
                ("graph", _graph_us_per_launch),
                ("eager", _eager_us_per_launch),
            ):
                base_us = fn(_launcher(scalar, args, False))
                ours_us = fn(_launcher(vectorised, args, True))
                row[f"{mode}_scalar_us"] = round(base_us, 3)
                row[f"{mode}_vectorised_us"] = round(ours_us, 3)
                row[f"{mode}_speedup"] = round(base_us / ours_us, 3)
            rows.append(row)
            print(row, flush=True)
    return rows


def bench_timing_overhead(steps: int = 2000) -> dict:
    out = {}
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
        host_us = (time.perf_counter() - t0) * 1e6 / steps
        torch.cuda.synchronize()
        out[f"host_us_per_step_{name}"] = round(host_us, 2)
    print(out, flush=True)
    return out


def main(out_path: str) -> None:
    result = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "flatten": bench_flatten(),
        "timing_overhead": bench_timing_overhead(),
    }
    with open(out_path, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
