# SPDX-License-Identifier: Apache-2.0
"""Patch block-verification/0002: with use_fp64 the acceptance test draws a
53-bit uniform (gumbel.tl_rand64) instead of the 32-bit Philox one.

The 53-bit draw refines the 32-bit one (same Philox stream, 22 more bits), so
decisions only change where the fp32 draw cannot resolve the acceptance
probability. The first test builds exactly such a case from known draws; the
others check the kernel against the reference token for token.
"""

import math

import pytest
import torch
from vllm.v1.worker.gpu.spec_decode import reference_rejection_sampler as ref

from tests.patched.block_verification.bv_inputs import make_batch, run_kernel, run_reference, valid_rows

# (seed, position) whose fp32 acceptance draw is small enough that fp32 cannot
# resolve it: u32 < u64 with a relative gap of 8e-5 and 3e-4 (found by search
# with the reference's Philox; the test re-derives the draws below).
RESOLUTION_CASES = [(1251228, 100), (113785, 102)]


def _resolution_batch(device: str) -> dict:
    """Two requests, one point-mass draft each, accepted with probability
    sqrt(u32 * u64): between the fp32 and the fp64 draw."""
    B, K = len(RESOLUTION_CASES), 1
    target = torch.zeros(B, K + 1, 2, dtype=torch.float64)
    pos = torch.zeros(B, K + 1, dtype=torch.int32)
    for r, (seed, p) in enumerate(RESOLUTION_CASES):
        u32 = ref.acceptance_uniform(seed, p, 0, False, use_fp64=False)
        u64 = ref.acceptance_uniform(seed, p, 0, False, use_fp64=True)
        assert u64 / u32 - 1 > 5e-5
        log_prob = 0.5 * (math.log(u32) + math.log(u64))
        # softmax([0, L])[1] = exp(log_prob)
        target[r, 0, 1] = log_prob - math.log1p(-math.exp(log_prob))
        pos[r] = torch.tensor([p, p + 1])
    draft_sampled = torch.tensor([[0, 1]] * B, dtype=torch.int64)
    idx = torch.arange(B, dtype=torch.int32)
    kw = dict(
        target_logits=target.float().view(B * (K + 1), 2),
        draft_logits=None,
        draft_sampled=draft_sampled.view(-1),
        cu_num_logits=torch.arange(B + 1, dtype=torch.int32) * (K + 1),
        pos=pos.view(-1),
        idx_mapping=idx,
        expanded_idx_mapping=idx.repeat_interleave(K + 1),
        expanded_local_pos=torch.arange(K + 1, dtype=torch.int32).repeat(B),
        temperature=torch.ones(B),
        seed=torch.tensor([s for s, _ in RESOLUTION_CASES], dtype=torch.int64),
        num_speculative_steps=K,
    )
    return {
        k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in kw.items()
    }


@pytest.mark.parametrize("use_block_verification", [False, True])
def test_fp64_draw_resolves_what_fp32_cannot(
    kernel_device: str, use_block_verification: bool
):
    kw = _resolution_batch(kernel_device)
    options = dict(use_block_verification=use_block_verification)
    # fp32: u32 < p, so the draft is accepted (draft + bonus).
    _, num_sampled = run_kernel(kw, **options, use_fp64=False)
    assert num_sampled.tolist() == [2, 2]
    # fp64: u64 > p, so it is rejected (one resampled token).
    _, num_sampled = run_kernel(kw, **options, use_fp64=True)
    assert num_sampled.tolist() == [1, 1], "fp64 sampling drew a 32-bit uniform"
    _, ref_num_sampled = run_reference(kw, **options, use_fp64=True)
    assert ref_num_sampled.tolist() == [1, 1]


# Moderate acceptance probabilities so that the draw decides often.
TEMPERATURES = [1.0, 0.8, 1.0, 1.2, 1.0, 0.9, 1.0, 0.0]
K, V = 4, 23


@pytest.mark.parametrize("use_block_verification", [False, True])
@pytest.mark.parametrize("has_draft_logits", [True, False])
def test_fp64_kernel_matches_reference(
    kernel_device: str, use_block_verification: bool, has_draft_logits: bool
):
    kw = make_batch(
        TEMPERATURES,
        K,
        V,
        draft_noise=1.5,
        has_draft_logits=has_draft_logits,
        placeholders={4: [2]},
        seed=11,
        device=kernel_device,
    )
    options = dict(use_block_verification=use_block_verification, use_fp64=True)
    sampled, num_sampled = run_kernel(kw, **options)
    expected = valid_rows(*run_reference(kw, **options))
    assert valid_rows(sampled, num_sampled) == expected
    # The same seed gives the same result run to run.
    again, again_num = run_kernel(kw, **options)
    assert valid_rows(again, again_num) == expected
    # Same stream as the fp32 draw: on ordinary inputs the accepted lengths
    # match the fp32 path (upstream's watermark test relies on this).
    _, num_sampled_fp32 = run_kernel(
        kw, use_block_verification=use_block_verification, use_fp64=False
    )
    assert num_sampled.tolist() == num_sampled_fp32.tolist()


@pytest.mark.parametrize("use_block_verification", [False, True])
def test_fp32_path_keeps_philox_draw(kernel_device: str, use_block_verification: bool):
    kw = make_batch(TEMPERATURES, K, V, draft_noise=1.5, seed=11, device=kernel_device)
    options = dict(use_block_verification=use_block_verification, use_fp64=False)
    sampled, num_sampled = run_kernel(kw, **options)
    assert valid_rows(sampled, num_sampled) == valid_rows(*run_reference(kw, **options))
