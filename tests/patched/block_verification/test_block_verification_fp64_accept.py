# SPDX-License-Identifier: Apache-2.0
"""Patch block-verification/0002: with use_fp64 the acceptance test draws the
53-bit murmur3 uniform instead of the 32-bit Philox one.

The reference reproduces both draws exactly, so the kernel must match the
reference's fp64 acceptance draw token for token, and must differ from what
the 32-bit draw would give on the same inputs (checked on the reference, so
the test cannot pass vacuously).
"""

import pytest
import torch
from bv_inputs import make_batch, run_kernel, run_reference, valid_rows
from vllm.v1.worker.gpu.spec_decode import reference_rejection_sampler as ref
from vllm.v1.worker.gpu.spec_decode import rejection_sampler_utils as rsu

# Moderate acceptance probabilities so that the draw decides often.
TEMPERATURES = [1.0, 0.8, 1.0, 1.2, 1.0, 0.9, 1.0, 0.0]
K, V = 4, 23


def _philox_uniforms(kw: dict, block: bool) -> torch.Tensor:
    """The 32-bit acceptance draws the unpatched kernel uses (per logit row)."""
    cu = kw["cu_num_logits"].tolist()
    pos = kw["pos"].tolist()
    state = kw["idx_mapping"].tolist()
    seeds = kw["seed"].tolist()
    u = torch.zeros(len(pos), dtype=torch.float64)
    for r in range(len(cu) - 1):
        for i in range(cu[r + 1] - cu[r] - 1):
            u[cu[r] + i] = ref.acceptance_uniform(
                seeds[state[r]], pos[cu[r] + i], i, block, use_fp64=False
            )
    return u


def test_accept_uniform_key_matches_reference():
    assert rsu._ACCEPT_UNIFORM_KEY == ref.ACCEPT_UNIFORM_KEY


@pytest.mark.parametrize("use_block_verification", [False, True])
@pytest.mark.parametrize("has_draft_logits", [True, False])
def test_fp64_acceptance_draw(
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
    # fp64 resampling with the 32-bit acceptance draw: the unpatched kernel.
    with_fp32_draw = valid_rows(
        *run_reference(
            kw, **options, accept_uniforms=_philox_uniforms(kw, use_block_verification)
        )
    )
    assert expected != with_fp32_draw, "inputs do not discriminate the draws"
    assert valid_rows(sampled, num_sampled) == expected

    # The same seed gives the same result run to run.
    again, again_num = run_kernel(kw, **options)
    assert valid_rows(again, again_num) == expected


@pytest.mark.parametrize("use_block_verification", [False, True])
def test_fp32_path_keeps_philox_draw(kernel_device: str, use_block_verification: bool):
    kw = make_batch(TEMPERATURES, K, V, draft_noise=1.5, seed=11, device=kernel_device)
    options = dict(use_block_verification=use_block_verification, use_fp64=False)
    sampled, num_sampled = run_kernel(kw, **options)
    assert valid_rows(sampled, num_sampled) == valid_rows(*run_reference(kw, **options))
