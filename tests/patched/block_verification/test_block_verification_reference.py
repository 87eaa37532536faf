# SPDX-License-Identifier: Apache-2.0
"""Properties of the pure-PyTorch reference rejection sampler (CPU, no Triton).

The reference (overlay: vllm/v1/worker/gpu/spec_decode/
reference_rejection_sampler.py) follows the kernels' formulas; these tests check
the formulas themselves: exact preservation of the target distribution by
enumeration, block >= standard in expected accepted length, greedy = argmax
matching, and placeholders ending verification.
"""

import itertools
import math
import random

import numpy as np
import pytest
import torch
from vllm.v1.worker.gpu.spec_decode import reference_rejection_sampler as ref


class PrefixTables:
    """Target and draft distributions that depend on the whole prefix."""

    def __init__(self, vocab_size: int, seed: int, draft_noise: float):
        self.V = vocab_size
        self.seed = seed
        self.draft_noise = draft_noise
        self._cache: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}

    def logits(self, prefix: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
        if prefix not in self._cache:
            g = torch.Generator().manual_seed(hash((self.seed, prefix)) % 2**31)
            target = 1.5 * torch.randn(self.V, generator=g, dtype=torch.float64)
            draft = target + self.draft_noise * torch.randn(
                self.V, generator=g, dtype=torch.float64
            )
            self._cache[prefix] = (target, draft)
        return self._cache[prefix]

    def p(self, prefix):
        return torch.softmax(self.logits(prefix)[0], -1)

    def q(self, prefix):
        return torch.softmax(self.logits(prefix)[1], -1)


def _exact_outputs(tables: PrefixTables, K: int, method: str, has_draft_logits: bool):
    """Exact distribution of the emitted sequences, and E[accepted length].

    Drafts are sampled from q (also for point-mass verification, which is valid
    for any proposal because it conditions on the drafted tokens).
    """
    block = method == "block"
    out: dict[tuple[int, ...], float] = {}
    expected_tau = 0.0
    for drafts in itertools.product(range(tables.V), repeat=K):
        q_seq = math.prod(float(tables.q(drafts[:i])[drafts[i]]) for i in range(K))
        target_logits = torch.stack(
            [tables.logits(drafts[:i])[0] for i in range(K + 1)]
        )
        draft_logits = (
            torch.stack([tables.logits(drafts[:i])[1] for i in range(K)])
            if has_draft_logits
            else None
        )
        plan = ref.plan_request(target_logits, draft_logits, list(drafts), 1.0, block)
        for tau, p_tau in enumerate(ref.accepted_length_distribution(plan, block)):
            if p_tau == 0.0:
                continue
            expected_tau += q_seq * p_tau * tau
            r = ref.recovery_probs(
                plan, tau, target_logits, draft_logits, list(drafts), 1.0, block
            )
            for y in range(tables.V):
                key = drafts[:tau] + (y,)
                out[key] = out.get(key, 0.0) + q_seq * p_tau * float(r[y])
    return out, expected_tau


def _completed_distribution(tables: PrefixTables, outputs: dict, length: int):
    """Extend each emitted sequence with target samples up to `length`."""
    complete = {}
    for z in itertools.product(range(tables.V), repeat=length):
        total = 0.0
        for m in range(1, length + 1):
            prob = outputs.get(z[:m], 0.0)
            if prob:
                for j in range(m, length):
                    prob *= float(tables.p(z[:j])[z[j]])
                total += prob
        complete[z] = total
    return complete


@pytest.mark.parametrize("method", ["standard", "block"])
@pytest.mark.parametrize("has_draft_logits", [True, False])
@pytest.mark.parametrize("vocab_size,K", [(2, 3), (3, 2), (4, 2)])
def test_emitted_tokens_follow_target_exactly(
    method: str, has_draft_logits: bool, vocab_size: int, K: int
):
    """Exact enumeration over all drafts and accepted lengths: the emitted
    sequence, completed with target samples, is distributed as the target."""
    tables = PrefixTables(vocab_size, seed=vocab_size * 10 + K, draft_noise=1.5)
    outputs, _ = _exact_outputs(tables, K, method, has_draft_logits)
    assert sum(outputs.values()) == pytest.approx(1.0, abs=1e-12)
    complete = _completed_distribution(tables, outputs, K + 1)
    for z, prob in complete.items():
        target = math.prod(float(tables.p(z[:j])[z[j]]) for j in range(K + 1))
        assert prob == pytest.approx(target, abs=1e-12), (z, prob, target)


@pytest.mark.parametrize("has_draft_logits", [True, False])
def test_block_accepts_at_least_as_many_in_expectation(has_draft_logits: bool):
    """Exact E[accepted length]. With point-mass drafts both reach the bound
    P(tau >= t) = prod p(d_j), so they are equal; with draft distributions
    block verification is strictly better on some inputs."""
    gains = []
    for seed, (V, K, noise) in enumerate(
        [(3, 3, 0.5), (3, 3, 1.5), (4, 2, 1.0), (2, 4, 2.5), (5, 2, 0.8)]
    ):
        tables = PrefixTables(V, seed=100 + seed, draft_noise=noise)
        _, e_std = _exact_outputs(tables, K, "standard", has_draft_logits)
        _, e_blk = _exact_outputs(tables, K, "block", has_draft_logits)
        assert e_blk >= e_std - 1e-12, (V, K, noise, e_blk, e_std)
        gains.append(e_blk - e_std)
    if has_draft_logits:
        # Strictly better somewhere, or the test is vacuous.
        assert max(gains) > 1e-3
    else:
        assert max(abs(g) for g in gains) < 1e-12


@pytest.mark.parametrize("method", ["standard", "block"])
def test_accepted_length_distribution_matches_uniforms(method: str):
    """Monte Carlo of accepted_length() against the closed form: 40,000 draws,
    every frequency within 5 standard errors (+1e-3) of its probability."""
    block = method == "block"
    tables = PrefixTables(6, seed=7, draft_noise=1.0)
    drafts = [2, 4, 1, 3]
    target_logits = torch.stack([tables.logits(tuple(drafts[:i]))[0] for i in range(5)])
    draft_logits = torch.stack([tables.logits(tuple(drafts[:i]))[1] for i in range(4)])
    plan = ref.plan_request(target_logits, draft_logits, drafts, 1.0, block)
    probs = ref.accepted_length_distribution(plan, block)
    rng = np.random.default_rng(0)
    n = 40_000
    counts = np.zeros(len(probs))
    for u in rng.random((n, 4)):
        counts[ref.accepted_length(plan, list(u), block)] += 1
    for c, p in zip(counts / n, probs, strict=True):
        assert abs(c - p) <= 5 * math.sqrt(max(p * (1 - p), 0.0) / n) + 1e-3


def test_greedy_is_argmax_matching():
    rng = random.Random(0)
    for trial in range(50):
        V, K = 5, 4
        target_logits = torch.randn(
            K + 1, V, generator=torch.Generator().manual_seed(trial)
        )
        argmax = target_logits.argmax(-1).tolist()
        drafts = [
            argmax[i] if rng.random() < 0.6 else rng.randrange(V) for i in range(K)
        ]
        if rng.random() < 0.3:
            drafts[rng.randrange(K)] = -1
        expected = []
        for i in range(K):
            expected.append(argmax[i])
            if drafts[i] != argmax[i]:
                break
        else:
            expected.append(argmax[K])
        for block in (False, True):
            got = ref.verify_request(
                target_logits, None, drafts, 0.0, [0.5] * K, None, block
            )
            assert got == expected


@pytest.mark.parametrize("use_block_verification", [False, True])
@pytest.mark.parametrize("has_draft_logits", [True, False])
def test_placeholder_ends_verification(
    use_block_verification: bool, has_draft_logits: bool
):
    """Nothing at or after a -1 is accepted, even a draft equal to the target
    (q = p, accepted with probability 1); the token at the placeholder is drawn
    from the target itself."""
    V, K = 6, 4
    g = torch.Generator().manual_seed(3)
    target_logits = torch.randn(K + 1, V, generator=g, dtype=torch.float64)
    draft_logits = target_logits[:K].clone() if has_draft_logits else None
    drafts = [1, -1, 2, 3]
    plan = ref.plan_request(
        target_logits, draft_logits, drafts, 1.0, use_block_verification
    )
    probs = ref.accepted_length_distribution(plan, use_block_verification)
    assert sum(probs[2:]) == 0.0
    if has_draft_logits:
        # q = p: the first draft is always accepted.
        assert probs[1] == pytest.approx(1.0)
    r = ref.recovery_probs(
        plan, 1, target_logits, draft_logits, drafts, 1.0, use_block_verification
    )
    torch.testing.assert_close(r, torch.softmax(target_logits[1], -1))
    for u in ([0.0] * K, [0.999] * K):
        assert ref.accepted_length(plan, u, use_block_verification) <= 1


def test_fp64_acceptance_uniform_refines_the_fp32_draw():
    """The fp64 acceptance draw has 53 bits, lies in (0, 1), and refines the
    fp32 Philox draw of the same (seed, position, step): the two differ by at
    most the fp32 draw's resolution (its scale is 1 ulp below 2**-31)."""
    for seed in (0, -5, 2**40 + 3, 113785):
        for pos in (0, 17, 102, 2**31 - 1):
            for step in (0, 3):
                for block in (False, True):
                    u64 = ref.acceptance_uniform(seed, pos, step, block, use_fp64=True)
                    u32 = ref.acceptance_uniform(seed, pos, step, block, use_fp64=False)
                    assert 0.0 < u64 < 1.0
                    assert ref.TL_RAND_MIN <= u32 < 1.0
                    assert float(np.float32(u32)) == u32
                    scaled = u64 * 2.0**53 - 0.5
                    assert scaled == int(scaled)
                    assert abs(u64 - u32) <= 2.0**-31 + u32 * 2.0**-22
