# SPDX-License-Identifier: Apache-2.0
"""The CUDA kernels one call launches, in launch order, from torch.profiler (CUPTI).

Used where a claim is "these two variants run the same kernels": the evidence is the two
recorded sequences, not timings.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import torch
from torch.profiler import ProfilerActivity, profile


def kernels(fn: Callable, warmup: int = 2) -> list[str]:
    """Names of the GPU kernels (and memsets/copies) one call of fn launches."""
    for _ in range(warmup):  # Triton compiles and autotunes outside the record
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    events.sort(key=lambda e: e.time_range.start)
    return [e.name for e in events]


def diff(a: list[str], b: list[str]) -> dict:
    """What a launches beyond b and b beyond a (as multisets)."""
    ca, cb = Counter(a), Counter(b)
    return {"only_first": sorted((ca - cb).elements()), "only_second": sorted((cb - ca).elements())}
