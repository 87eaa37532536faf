# SPDX-License-Identifier: Apache-2.0
"""The Triton rejection sampler against the pure-PyTorch reference.

The reference reproduces the kernels' random draws (Philox acceptance
uniforms, murmur3 Gumbel noise), so every emitted token must match exactly.
Runs on CUDA, or on CPU through the Triton interpreter (see conftest.py) with a
small vocabulary; about one second per case there.
"""

import pytest

from tests.patched.block_verification.bv_inputs import make_batch, run_kernel, run_reference, valid_rows

# Greedy, sampled and mixed rows in one batch; V = 37 leaves a partial block.
TEMPERATURES = [0.0, 1.0, 0.7, 0.0, 1.5, 1.0]
K, V = 4, 37
# Request 1: a placeholder after a valid draft; request 3 (greedy): at step 0;
# request 5: a placeholder followed by a valid draft.
PLACEHOLDERS = {1: [2, 3], 3: [0], 5: [1]}


@pytest.mark.parametrize("use_block_verification", [False, True])
@pytest.mark.parametrize("has_draft_logits", [True, False])
def test_kernel_matches_reference(
    kernel_device: str, use_block_verification: bool, has_draft_logits: bool
):
    kw = make_batch(
        TEMPERATURES,
        K,
        V,
        draft_noise=1.0,
        has_draft_logits=has_draft_logits,
        placeholders=PLACEHOLDERS,
        device=kernel_device,
    )
    options = dict(use_block_verification=use_block_verification)
    sampled, num_sampled = run_kernel(kw, **options)
    ref_sampled, ref_num_sampled = run_reference(kw, **options)
    assert num_sampled.tolist() == ref_num_sampled.tolist()
    assert valid_rows(sampled, num_sampled) == valid_rows(ref_sampled, ref_num_sampled)
    # Placeholders end verification: request 1 keeps at most 2 drafts, request
    # 3 (greedy, placeholder first) emits exactly the target argmax.
    assert int(num_sampled[1]) <= 3 and int(num_sampled[3]) == 1
    assert int(num_sampled[5]) <= 2


def test_kernel_matches_reference_with_explicit_rejections(kernel_device: str):
    """A noisy draft so that rejections and residual resampling happen often
    (the case above mostly accepts); block verification, draft logits."""
    kw = make_batch([1.0] * 8, 3, 29, draft_noise=3.0, seed=5, device=kernel_device)
    for block in (False, True):
        sampled, num_sampled = run_kernel(kw, use_block_verification=block)
        ref_sampled, ref_num = run_reference(kw, use_block_verification=block)
        assert valid_rows(sampled, num_sampled) == valid_rows(ref_sampled, ref_num)
        assert min(num_sampled.tolist()) < 4  # some rejection happened
