# SPDX-License-Identifier: Apache-2.0
"""Synthetic harness: standard vs block verification on controlled drafts.

Drives the real ``rejection_sample`` (vLLM's Triton kernels) with synthetic
target and draft distributions whose divergence is controlled by the sampling
temperature and a draft-quality knob (Gaussian noise on the draft logits), and
reports, per (temperature, noise):

* the mean accepted length (accepted drafts per request) of standard and block
  verification on the same inputs, and the relative gain of block;
* with --exact, the same expectation computed exactly over the acceptance
  uniforms from the reference sampler's thresholds (given the drawn drafts),
  which removes the uniforms' Monte Carlo noise;
* the total-variation distance between the emitted tokens and the target, per
  position, against the same statistic for direct target samples of the same
  size (the Monte Carlo floor). Emitted sequences are completed with target
  samples past their length, so every position should follow the target
  exactly.

Setup: G groups of distributions, R requests (trials) per group. Group g has raw
target logits L_g ~ target_scale * N(0, 1) of shape [K + 1, V] (a separate
distribution per position, independent of the drafted prefix); the draft
logits are L_g[:K] + noise * N(0, 1). The target logits are passed processed
(L / T); the draft logits pre-temperature, as the model runner stores them.
Drafts are sampled from softmax(draft / T) (argmax at T = 0).

Runs on CUDA, or on CPU through the Triton interpreter (small V; set up here
before vLLM is imported). Needs the patched tree (for the reference sampler);
``--no-exact`` runs on any vLLM 0.34.0 tree.

    python benchmarks/block_verification/synthetic_harness.py            # CPU
    python benchmarks/block_verification/synthetic_harness.py --device cuda \\
        --vocab 512 --groups 16 --trials 8192 --k 5 --json out.json
"""

import argparse
import json
import os
import sys
import time


def _setup_interpreter() -> None:
    os.environ.setdefault("TRITON_INTERPRET", "1")
    # vllm.triton_utils keeps Triton enabled without a GPU driver only when
    # CUDA_VISIBLE_DEVICES is set and empty.
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
    import triton.language as tl
    import triton.language.extra.libdevice as libdevice

    def _log1p(x):
        return tl.log(1.0 + x)

    libdevice.log1p = _log1p  # a stub under the interpreter


def tvd(tokens, group, target_probs, trials: int) -> float:
    """Mean over groups and positions of the total-variation distance between
    the empirical distribution of tokens [B, K + 1] and target_probs."""
    import torch

    G, P, V = target_probs.shape
    positions = torch.arange(P, device=tokens.device)
    index = ((group[:, None] * P + positions[None, :]) * V + tokens).reshape(-1)
    counts = torch.zeros(G * P * V, device=tokens.device)
    counts.scatter_add_(0, index, torch.ones_like(index, dtype=torch.float32))
    freq = counts.view(G, P, V) / trials
    return float(0.5 * (freq - target_probs).abs().sum(-1).mean())


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda if any)")
    p.add_argument("--vocab", type=int, default=None)
    p.add_argument("--groups", type=int, default=None)
    p.add_argument("--trials", type=int, default=None)
    p.add_argument("--k", type=int, default=None, help="draft tokens per request")
    p.add_argument("--temps", default=None, help="default 0,0.6,1.0,1.5 (CPU: 0,1)")
    p.add_argument("--noise", default=None, help="default 0.25,0.5,1,2 (CPU: 0.5,2)")
    p.add_argument("--target-scale", type=float, default=2.0)
    p.add_argument("--fp64", action="store_true", help="use_fp64 sampling")
    p.add_argument("--exact", dest="exact", action="store_true", default=None)
    p.add_argument("--no-exact", dest="exact", action="store_false")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="write the rows here")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cpu":
        _setup_interpreter()
        defaults = dict(vocab=32, groups=4, trials=64, k=3, temps="0,1", noise="0.5,2")
    else:
        defaults = dict(
            vocab=512,
            groups=16,
            trials=8192,
            k=5,
            temps="0,0.6,1.0,1.5",
            noise="0.25,0.5,1,2",
        )
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.exact is None:
        args.exact = device == "cpu"

    from vllm.v1.worker.gpu.spec_decode.draft_logits import DraftLogitsCache
    from vllm.v1.worker.gpu.spec_decode.rejection_sampler_utils import (
        rejection_sample,
    )

    ref = None
    if args.exact:
        from vllm.v1.worker.gpu.spec_decode import reference_rejection_sampler as ref

    G, R, K, V = args.groups, args.trials, args.k, args.vocab
    B = G * R
    temps = [float(t) for t in args.temps.split(",")]
    noises = [float(n) for n in args.noise.split(",")]
    print(
        f"device={device} V={V} K={K} groups={G} trials/group={R} "
        f"target_scale={args.target_scale} fp64={args.fp64}",
        flush=True,
    )

    rows = []

    def write_json() -> None:
        if not args.json:
            return
        with open(args.json, "w") as f:
            json.dump(
                dict(
                    device=device,
                    vocab=V,
                    k=K,
                    groups=G,
                    trials_per_group=R,
                    target_scale=args.target_scale,
                    fp64=args.fp64,
                    rows=rows,
                ),
                f,
                indent=1,
            )

    for ci, (temp, noise) in enumerate((t, n) for t in temps for n in noises):
        t0 = time.time()
        g = torch.Generator(device=device).manual_seed(args.seed * 1000 + ci)
        raw_target = args.target_scale * torch.randn(
            G, K + 1, V, device=device, generator=g
        )
        raw_draft = raw_target[:, :K] + noise * torch.randn(
            G, K, V, device=device, generator=g
        )
        t_eff = temp if temp > 0 else 1.0
        target_probs = torch.softmax(raw_target / t_eff, dim=-1)  # [G, K+1, V]
        group = torch.arange(G, device=device).repeat_interleave(R)  # [B]
        if temp > 0:
            q = torch.softmax(raw_draft / t_eff, dim=-1)
            drafts = torch.multinomial(q[group].reshape(B * K, V), 1, generator=g).view(
                B, K
            )
        else:
            drafts = raw_draft.argmax(-1)[group]
        draft_sampled = torch.zeros(B, K + 1, dtype=torch.int64, device=device)
        draft_sampled[:, 1:] = drafts
        target_logits = (raw_target / t_eff)[group].reshape(B * (K + 1), V)
        if temp == 0:
            target_logits = raw_target[group].reshape(B * (K + 1), V)
        cache = DraftLogitsCache(1, 1, 1, dtype=torch.float32, fill=0.0, device=device)
        cache.values = raw_draft[group].contiguous()  # indexed by request state
        cache.row_mapping = None
        idx = torch.arange(B, dtype=torch.int32, device=device)
        kw = dict(
            target_logits=target_logits.contiguous(),
            draft_logits_cache=cache,
            draft_sampled=draft_sampled.reshape(-1),
            cu_num_logits=torch.arange(B + 1, dtype=torch.int32, device=device)
            * (K + 1),
            pos=torch.arange(B * (K + 1), dtype=torch.int32, device=device),
            idx_mapping=idx,
            expanded_idx_mapping=idx.repeat_interleave(K + 1),
            expanded_local_pos=torch.arange(
                K + 1, dtype=torch.int32, device=device
            ).repeat(B),
            temperature=torch.full((B,), temp, device=device),
            seed=torch.arange(B, dtype=torch.int64, device=device) + ci * B,
            num_speculative_steps=K,
            use_fp64=args.fp64,
        )
        row = dict(temperature=temp, draft_noise=noise)
        positions = torch.arange(K + 1, device=device)
        # Target samples for completion and for the Monte Carlo floor.
        fill = torch.multinomial(
            target_probs[group].reshape(B * (K + 1), V), 1, generator=g
        ).view(B, K + 1)
        floor = torch.multinomial(
            target_probs[group].reshape(B * (K + 1), V), 1, generator=g
        ).view(B, K + 1)

        results = {}
        for name, block in (("standard", False), ("block", True)):
            sampled, num_sampled = rejection_sample(**kw, use_block_verification=block)
            completed = torch.where(
                positions[None, :] < num_sampled[:, None].long(), sampled, fill
            )
            results[name] = (sampled, num_sampled)
            row[f"{name}_accepted"] = float((num_sampled.float() - 1).mean())
            if temp > 0:
                row[f"{name}_tvd"] = tvd(completed, group, target_probs, R)
        row["block_gain_pct"] = (
            100.0 * (row["block_accepted"] / row["standard_accepted"] - 1.0)
            if row["standard_accepted"] > 0
            else None
        )
        if temp > 0:
            row["tvd_floor"] = tvd(floor, group, target_probs, R)
        else:
            # Greedy: both modes must agree token for token (valid prefixes).
            (s_std, n_std), (s_blk, n_blk) = results["standard"], results["block"]
            same = torch.equal(n_std, n_blk)
            if same:
                mask = positions[None, :] < n_std[:, None].long()
                same = torch.equal(s_std[mask], s_blk[mask])
            row["greedy_identical"] = bool(same)

        if ref is not None and temp > 0:
            # Exact E[accepted | drafts] from the reference thresholds.
            tgt = kw["target_logits"].view(B, K + 1, V).cpu()
            dl = cache.values.cpu()
            dr = drafts.cpu().tolist()
            for name, block in (("standard", False), ("block", True)):
                total = 0.0
                for b in range(B):
                    plan = ref.plan_request(tgt[b], dl[b], dr[b], temp, block)
                    dist = ref.accepted_length_distribution(plan, block)
                    total += sum(t * p for t, p in enumerate(dist))
                row[f"{name}_accepted_exact"] = total / B
            row["block_gain_exact_pct"] = 100.0 * (
                row["block_accepted_exact"] / row["standard_accepted_exact"] - 1.0
            )
        row["seconds"] = round(time.time() - t0, 1)
        rows.append(row)
        write_json()  # after every row, so a cut-short run keeps its rows
        print(
            json.dumps(
                {k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}
            ),
            flush=True,
        )

    return 0


if __name__ == "__main__":
    sys.exit(main())
