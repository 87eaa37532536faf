# SPDX-License-Identifier: Apache-2.0
"""GPU micro-benchmark of the block-verification patches (rejection sampler).

1. Temperature 0 (all greedy), V = 129,280, 5 draft tokens, with draft logits:
   the sampler step through RejectionSampler._verify (stub sampler, no
   sampling params, as upstream's test_verify_rejects_unproposed_drafts) for
     standard     rejection_sample_method standard
     block        block mode without the skip (host decision unavailable:
                  idx_mapping_np=None, i.e. what vLLM 0.34.0 runs)
     block_skip   block mode with patch 0001 (idx_mapping_np given, all greedy)
   Kernel trace (torch.profiler): block_skip must launch exactly the kernels
   standard launches, block those plus the prep kernels. Timing: interleaved
   rounds with a second copy of standard as the A-vs-A control. Goal: block_skip
   within 2 % of standard. Also checks that all variants emit the same tokens.
2. Temperature 1, the acceptance draw: rejection_sample with use_fp64=True from
   the patched module against the same call into vLLM 0.34.0's
   rejection_sampler_utils.py (loaded from the base tree as a separate module),
   and the fp32 path of both (must be bit-identical). Goal: patched fp64 within
   2 % of unpatched fp64.

Usage: python -m benchmarks.gpu.bench.block_verification OUT.json BASE_TREE
Exit 1 when a check fails (kernel trace, identical outputs).
"""

import importlib.util
import json
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

if not torch.cuda.is_available():  # dry run under the Triton interpreter (tests/patched/conftest.py)
    os.environ.setdefault("TRITON_INTERPRET", "1")
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
from vllm.v1.worker.gpu.sample.states import SamplingStates
from vllm.v1.worker.gpu.spec_decode import rejection_sampler_utils as rsu
from vllm.v1.worker.gpu.spec_decode.draft_logits import DraftLogitsCache
from vllm.v1.worker.gpu.spec_decode.rejection_sampler import RejectionSampler

from benchmarks.gpu import timing, trace

K, V = 5, 129_280
BATCHES_T0 = (1, 4, 16, 64, 128, 256)
BATCHES_T1 = (1, 8, 64, 256)
DEV = "cuda" if torch.cuda.is_available() else "cpu"
TRACE_BATCHES = (1, 64)
PREP_KERNELS = ("_compute_cumulative_log_p_kernel", "_compute_local_residual_mass_kernel")
RSU = "vllm/v1/worker/gpu/spec_decode/rejection_sampler_utils.py"
if DEV == "cpu":  # dry run of the script under the Triton interpreter
    V, BATCHES_T0, BATCHES_T1, TRACE_BATCHES = 64, (1, 3), (2,), ()


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


def valid(out) -> list[list[int]]:
    sampled, num_sampled = out
    return [sampled[r, :n].tolist() for r, n in enumerate(num_sampled.tolist())]


def load_base_rsu(path: str):
    spec = importlib.util.spec_from_file_location("base_rejection_sampler_utils", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def kernel_trace(B: int) -> dict:
    """The kernels of one sampler step per variant, and the claim checked on them."""
    kw = inputs(B, 0.0)
    arange_np = np.arange(B)
    seqs = {
        "standard": trace.kernels(verify_fn(kw, rejection_sampler(kw, False), arange_np)),
        "block": trace.kernels(verify_fn(kw, rejection_sampler(kw, True), None)),
        "block_skip": trace.kernels(verify_fn(kw, rejection_sampler(kw, True), arange_np)),
    }
    extra = trace.diff(seqs["block"], seqs["standard"])
    checks = {
        "block_skip_launches_exactly_standard": seqs["block_skip"] == seqs["standard"],
        "block_launches_all_of_standard": not extra["only_second"],
        "block_adds_the_prep_kernels": all(any(p in k for k in extra["only_first"]) for p in PREP_KERNELS),
    }
    return dict(B=B, kernels=seqs, block_extra=extra["only_first"],
                block_extra_not_prep=[k for k in extra["only_first"] if not any(p in k for p in PREP_KERNELS)],
                checks=checks, ok=all(checks.values()))


def main() -> int:
    out_path, base_tree = sys.argv[1], Path(sys.argv[2])
    base = load_base_rsu(str(base_tree / RSU))
    result = dict(
        device=torch.cuda.get_device_name() if DEV == "cuda" else "cpu (dry run)",
        torch=torch.__version__,
        vocab=V,
        draft_tokens=K,
        trace=[],
        greedy=[],
        fp64=[],
    )

    def save():
        with open(out_path, "w") as f:
            json.dump(result, f, indent=1)

    t0 = time.time()
    for B in TRACE_BATCHES:
        row = kernel_trace(B)
        result["trace"].append(row)
        print(json.dumps({k: row[k] for k in ("B", "block_extra", "checks")}), flush=True)
        save()
    for B in BATCHES_T0:
        kw = inputs(B, 0.0)
        arange_np = np.arange(B)
        fns = {
            "standard": verify_fn(kw, rejection_sampler(kw, False), arange_np),
            "block": verify_fn(kw, rejection_sampler(kw, True), None),
            "block_skip": verify_fn(kw, rejection_sampler(kw, True), arange_np),
        }
        outs = {name: valid(fn()) for name, fn in fns.items()}
        t = timing.compare(fns, control="standard")
        row = dict(
            B=B,
            us=t["variants"],
            timing={k: t[k] for k in ("mode", "rounds", "inner")},
            block_over_standard=timing.ratio(t, "block", "standard"),
            block_skip_over_standard=timing.ratio(t, "block_skip", "standard"),
            all_modes_identical=all(o == outs["block"] for o in outs.values()),
            mean_accepted=float(np.mean([len(o) - 1 for o in outs["block"]])),
        )
        result["greedy"].append(row)
        print(json.dumps({k: row[k] for k in ("B", "block_over_standard", "block_skip_over_standard",
                                              "all_modes_identical")}), flush=True)
        save()

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
            t = timing.compare(fns, control="base_fp64")
            lengths = {n: [len(x) for x in o] for n, o in outs.items()}
            row = dict(
                B=B,
                block=block,
                us=t["variants"],
                timing={k: t[k] for k in ("mode", "rounds", "inner")},
                patched_fp64_over_base_fp64=timing.ratio(t, "patched_fp64", "base_fp64"),
                patched_fp32_over_base_fp32=timing.ratio(t, "patched_fp32", "base_fp32"),
                fp64_over_fp32=timing.ratio(t, "patched_fp64", "patched_fp32"),
                fp32_bit_identical_to_base=outs["patched_fp32"] == outs["base_fp32"],
                fp64_deterministic=again == outs["patched_fp64"],
                fp64_lengths_equal_fp32=lengths["patched_fp64"]
                == lengths["patched_fp32"],
            )
            result["fp64"].append(row)
            print(json.dumps({k: row[k] for k in ("B", "block", "patched_fp64_over_base_fp64",
                                                  "fp32_bit_identical_to_base")}), flush=True)
            save()
    result["seconds"] = round(time.time() - t0, 1)
    checks = [r["ok"] for r in result["trace"]]
    checks += [r["all_modes_identical"] for r in result["greedy"]]
    checks += [r["fp32_bit_identical_to_base"] and r["fp64_deterministic"] and r["fp64_lengths_equal_fp32"]
               for r in result["fp64"]]
    result["ok"] = all(checks) and (DEV == "cpu" or bool(result["trace"]))
    save()
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
