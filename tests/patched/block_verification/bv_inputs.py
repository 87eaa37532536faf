# SPDX-License-Identifier: Apache-2.0
"""Shared inputs for the block-verification tests (imported by the tests)."""

import torch


def make_batch(
    temperatures: list[float],
    num_speculative_steps: int,
    vocab_size: int,
    *,
    draft_noise: float = 1.0,
    has_draft_logits: bool = True,
    placeholders: dict[int, list[int]] | None = None,
    seed: int = 0,
    device: str = "cpu",
) -> dict:
    """Inputs of rejection_sample for one batch, drafts sampled from q.

    Request r has temperature temperatures[r]; its draft logits are the raw
    target logits plus draft_noise * N(0, 1) (stored pre-temperature, as the
    kernels expect), and its target logits are divided by the temperature
    (processed, as _verify passes them). Request states are a permutation of
    the batch rows so that idx_mapping is exercised. placeholders maps a
    request to draft steps that become -1.
    """
    g = torch.Generator().manual_seed(seed)
    B, K, V = len(temperatures), num_speculative_steps, vocab_size
    num_logits = B * (K + 1)
    raw_target = 2.0 * torch.randn(B, K + 1, V, generator=g)
    raw_draft = raw_target[:, :K] + draft_noise * torch.randn(B, K, V, generator=g)
    temps = torch.tensor(temperatures, dtype=torch.float32)
    safe_t = torch.where(temps > 0, temps, torch.ones_like(temps)).view(B, 1, 1)
    target = torch.where(
        temps.view(B, 1, 1) > 0, raw_target / safe_t, raw_target
    ).reshape(num_logits, V)
    q = torch.softmax(raw_draft / safe_t, dim=-1)
    drafts = torch.multinomial(q.reshape(B * K, V), 1, generator=g).view(B, K)
    # Greedy requests get a greedy drafter.
    drafts = torch.where((temps == 0).view(B, 1), raw_draft.argmax(-1), drafts)
    for r, steps in (placeholders or {}).items():
        for i in steps:
            drafts[r, i] = -1
    draft_sampled = torch.zeros(B, K + 1, dtype=torch.int64)
    draft_sampled[:, 1:] = drafts

    # Request states in reverse order of the batch rows.
    state = torch.arange(B - 1, -1, -1, dtype=torch.int32)
    draft_logits = torch.empty(B, K, V)
    draft_logits[state.long()] = raw_draft
    temperature = torch.empty(B)
    temperature[state.long()] = temps
    seeds = torch.empty(B, dtype=torch.int64)
    seeds[state.long()] = torch.arange(B, dtype=torch.int64) * 7919 + 11 + seed

    kw = dict(
        target_logits=target,
        draft_logits=draft_logits if has_draft_logits else None,
        draft_sampled=draft_sampled.reshape(-1),
        cu_num_logits=torch.arange(B + 1, dtype=torch.int32) * (K + 1),
        pos=torch.arange(num_logits, dtype=torch.int32) + 100,
        idx_mapping=state,
        expanded_idx_mapping=state.repeat_interleave(K + 1),
        expanded_local_pos=torch.arange(K + 1, dtype=torch.int32).repeat(B),
        temperature=temperature,
        seed=seeds,
        num_speculative_steps=K,
    )
    return {
        k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in kw.items()
    }


def draft_cache(draft_logits: torch.Tensor | None):
    """Wrap draft logits the way the model runner passes them."""
    if draft_logits is None:
        return None
    from vllm.v1.worker.gpu.spec_decode.draft_logits import DraftLogitsCache

    cache = DraftLogitsCache(
        1, 1, 1, dtype=draft_logits.dtype, fill=0.0, device=draft_logits.device
    )
    cache.values = draft_logits
    cache.row_mapping = None
    return cache


def run_kernel(kw: dict, **options) -> tuple[torch.Tensor, torch.Tensor]:
    from vllm.v1.worker.gpu.spec_decode.rejection_sampler_utils import (
        rejection_sample,
    )

    args = dict(kw)
    args["draft_logits_cache"] = draft_cache(args.pop("draft_logits"))
    sampled, num_sampled = rejection_sample(**args, **options)
    return sampled.cpu(), num_sampled.cpu()


def run_reference(kw: dict, **options) -> tuple[torch.Tensor, torch.Tensor]:
    from vllm.v1.worker.gpu.spec_decode.reference_rejection_sampler import (
        rejection_sample_reference,
    )

    return rejection_sample_reference(
        kw["target_logits"],
        kw["draft_logits"],
        kw["draft_sampled"],
        kw["cu_num_logits"],
        kw["pos"],
        kw["idx_mapping"],
        kw["temperature"],
        kw["seed"],
        kw["num_speculative_steps"],
        **options,
    )


def valid_rows(sampled: torch.Tensor, num_sampled: torch.Tensor) -> list[list[int]]:
    """Emitted tokens per request; the buffer past num_sampled is garbage."""
    return [sampled[r, : int(n)].tolist() for r, n in enumerate(num_sampled)]
