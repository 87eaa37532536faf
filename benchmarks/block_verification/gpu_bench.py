# SPDX-License-Identifier: Apache-2.0
"""GPU micro-benchmark of the block-verification patches (rejection sampler).

1. Temperature 0 (all greedy), V = 129,280, 5 draft tokens, with draft logits:
   the sampler step through RejectionSampler._verify (stub sampler, no
   sampling params, as upstream's test_verify_rejects_unproposed_drafts) for
     standard     rejection_sample_method standard
     block        block mode without the skip (host decision unavailable:
                  idx_mapping_np=None, i.e. what vLLM 0.34.0 runs)
     block_skip   block mode with patch 0001 (idx_mapping_np given, all greedy)
   and rejection_sample called directly with use_block_verification False/True.
   Goal: block_skip within 2 % of standard. Also checks that block_skip emits
   exactly what block emits (valid prefixes).
2. Temperature 1, the acceptance draw: rejection_sample with use_fp64=True from
   the patched module against the same call into vLLM 0.34.0's
   rejection_sampler_utils.py (loaded from BASE_RSU as a separate module), and
   the fp32 path of both (must be bit-identical). Goal: patched fp64 within 2 %
   of unpatched fp64.

Timing: CUDA events around 200 back-to-back calls, median of 5 repetitions,
variants interleaved. Usage: python gpu_bench.py OUT.json BASE_RSU.py
"""

import importlib.util
import json
import sys
import time
from types import SimpleNamespace

import numpy as np
import torch
from vllm.v1.worker.gpu.sample.states import SamplingStates
from vllm.v1.worker.gpu.spec_decode import rejection_sampler_utils as rsu
from vllm.v1.worker.gpu.spec_decode.draft_logits import DraftLogitsCache
from vllm.v1.worker.gpu.spec_decode.rejection_sampler import RejectionSampler

K, V = 5, 129_280
BATCHES_T0 = (1, 4, 16, 64, 128, 256)
BATCHES_T1 = (1, 8, 64, 256)
DEV = "cuda" if torch.cuda.is_available() else "cpu"
if DEV == "cpu":  # dry run of the script under the Triton interpreter
    V, BATCHES_T0, BATCHES_T1 = 64, (1, 3), (2,)


def inputs(B: int, temp: float, dev: str = DEV) -> dict:
    """As h200-kit/sampler_bench.py: draft = target + 0.5 N(0, 1)."""
    num_logits = B * (K + 1)
    g = torch.Generator(device=dev).manual_seed(0)
    target = torch.randn(num_logits, V, device=dev, generator=g)
    draft = (
        target.view(B, K + 1, V)[:, :K]
        + 0.5 * torch.randn(B, K, V, device=dev, generator=g)
    ).contiguous()
    cache = DraftLogitsCache(1, 1, 1, dtype=draft.dtype, fill=0.0, device=dev)
    cache.values = draft
    cache.row_mapping = None
    ds = torch.zeros(B, K + 1, dtype=torch.int64, device=dev)
    ds[:, 1:] = draft.argmax(-1)
    idx = torch.arange(B, dtype=torch.int32, device=dev)
    return dict(
        target_logits=target,
        draft_logits_cache=cache,
        draft_sampled=ds.reshape(-1),
        cu_num_logits=torch.arange(B + 1, dtype=torch.int32, device=dev) * (K + 1),
        pos=torch.arange(num_logits, dtype=torch.int32, device=dev),
        idx_mapping=idx,
        expanded_idx_mapping=idx.repeat_interleave(K + 1),
        expanded_local_pos=torch.arange(K + 1, dtype=torch.int32, device=dev).repeat(B),
        temperature=torch.full((B,), temp, dtype=torch.float32, device=dev),
        seed=torch.arange(B, dtype=torch.int64, device=dev),
        num_speculative_steps=K,
    )


def rejection_sampler(kw: dict, use_block_verification: bool) -> RejectionSampler:
    B = kw["idx_mapping"].shape[0]
    states = object.__new__(SamplingStates)
    states.temperature = SimpleNamespace(
        np=kw["temperature"].cpu().numpy().copy(), gpu=kw["temperature"]
    )
    states.seeds = SimpleNamespace(gpu=kw["seed"])
    rs = object.__new__(RejectionSampler)
    rs.sampler = SimpleNamespace(
        apply_sampling_params=lambda logits, *args: logits,
        sampling_states=states,
        use_fp64_gumbel=False,
        trace_replay_state=None,
        may_mask_logits=np.zeros(B, dtype=bool),
    )
    rs.num_speculative_steps = K
    rs.synthetic_conditional_rates = None
    rs.use_block_verification = use_block_verification
    rs.fly_window_size = 0
    rs.fly_entropy_threshold = 0.3
    rs.fly_entropy_top_k = 3
    rs.watermark_key = None
    return rs


def verify_fn(kw: dict, rs: RejectionSampler, idx_mapping_np):
    def fn():
        _, sampled, num_sampled = rs._verify(
            kw["target_logits"],
            kw["draft_logits_cache"],
            kw["draft_sampled"],
            kw["pos"],
            kw["cu_num_logits"],
            kw["idx_mapping"],
            idx_mapping_np,
            kw["expanded_idx_mapping"],
            kw["expanded_local_pos"],
            None,
        )
        return sampled, num_sampled

    return fn


def timeit(fns: dict, n: int = 200, reps: int = 5) -> dict:
    """Median us per call of each fn; the variants are interleaved."""
    if DEV == "cpu":
        n, reps = 1, 1
    for fn in fns.values():
        for _ in range(20 if DEV == "cuda" else 1):
            fn()
    times = {name: [] for name in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            if DEV == "cpu":
                t = time.perf_counter()
                fn()
                times[name].append((time.perf_counter() - t) * 1e6)
                continue
            start, end = torch.cuda.Event(True), torch.cuda.Event(True)
            torch.cuda.synchronize()
            start.record()
            for _ in range(n):
                fn()
            end.record()
            torch.cuda.synchronize()
            times[name].append(start.elapsed_time(end) / n * 1000)
    return {name: round(float(np.median(ts)), 2) for name, ts in times.items()}


def valid(out) -> list[list[int]]:
    sampled, num_sampled = out
    return [sampled[r, :n].tolist() for r, n in enumerate(num_sampled.tolist())]


def load_base_rsu(path: str):
    spec = importlib.util.spec_from_file_location("base_rejection_sampler_utils", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> int:
    out_path, base_path = sys.argv[1], sys.argv[2]
    base = load_base_rsu(base_path)
    result = dict(
        device=torch.cuda.get_device_name() if DEV == "cuda" else "cpu (dry run)",
        torch=torch.__version__,
        vocab=V,
        draft_tokens=K,
        greedy=[],
        fp64=[],
    )
    t0 = time.time()
    for B in BATCHES_T0:
        kw = inputs(B, 0.0)
        arange_np = np.arange(B)
        fns = {
            "standard": verify_fn(kw, rejection_sampler(kw, False), arange_np),
            "block": verify_fn(kw, rejection_sampler(kw, True), None),
            "block_skip": verify_fn(kw, rejection_sampler(kw, True), arange_np),
            "direct_standard": lambda kw=kw: rsu.rejection_sample(
                **kw, use_block_verification=False
            ),
            "direct_block": lambda kw=kw: rsu.rejection_sample(
                **kw, use_block_verification=True
            ),
        }
        outs = {name: valid(fn()) for name, fn in fns.items()}
        us = timeit(fns)
        row = dict(
            B=B,
            us=us,
            block_over_standard=round(us["block"] / us["standard"], 3),
            block_skip_over_standard=round(us["block_skip"] / us["standard"], 3),
            direct_block_over_standard=round(
                us["direct_block"] / us["direct_standard"], 3
            ),
            block_skip_identical_to_block=outs["block_skip"] == outs["block"],
            all_modes_identical=all(o == outs["block"] for o in outs.values()),
            mean_accepted=float(np.mean([len(o) - 1 for o in outs["block"]])),
        )
        result["greedy"].append(row)
        print(json.dumps(row), flush=True)

    for B in BATCHES_T1:
        kw = inputs(B, 1.0)
        for block in (False, True):
            opts = dict(use_block_verification=block)
            fns = {
                "patched_fp32": lambda o=opts, kw=kw: rsu.rejection_sample(**kw, **o),
                "base_fp32": lambda o=opts, kw=kw: base.rejection_sample(**kw, **o),
                "patched_fp64": lambda o=opts, kw=kw: rsu.rejection_sample(
                    **kw, **o, use_fp64=True
                ),
                "base_fp64": lambda o=opts, kw=kw: base.rejection_sample(
                    **kw, **o, use_fp64=True
                ),
            }
            outs = {name: valid(fn()) for name, fn in fns.items()}
            again = valid(fns["patched_fp64"]())
            us = timeit(fns)
            lengths = {n: [len(x) for x in o] for n, o in outs.items()}
            row = dict(
                B=B,
                block=block,
                us=us,
                patched_fp64_over_base_fp64=round(
                    us["patched_fp64"] / us["base_fp64"], 3
                ),
                patched_fp32_over_base_fp32=round(
                    us["patched_fp32"] / us["base_fp32"], 3
                ),
                fp64_over_fp32=round(us["patched_fp64"] / us["patched_fp32"], 3),
                fp32_bit_identical_to_base=outs["patched_fp32"] == outs["base_fp32"],
                fp64_deterministic=again == outs["patched_fp64"],
                fp64_lengths_equal_fp32=lengths["patched_fp64"]
                == lengths["patched_fp32"],
            )
            result["fp64"].append(row)
            print(json.dumps(row), flush=True)
    result["seconds"] = round(time.time() - t0, 1)
    with open(out_path, "w") as f:
        json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
