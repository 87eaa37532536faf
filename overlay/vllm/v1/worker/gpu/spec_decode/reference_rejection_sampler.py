# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Pure-PyTorch reference of the speculative-decoding rejection sampler.

This mirrors the Triton kernels of ``rejection_sampler_utils.py`` formula by
formula, in float64, so that verification can be tested on a machine without a
GPU and cross-checked against the kernels on one. It imports neither Triton nor
the rest of vLLM.

One request has ``n`` draft tokens ``d_0 .. d_{n-1}`` (``-1`` marks a
placeholder that must not be accepted) and ``n + 1`` rows of processed target
logits; row ``i`` is the target distribution ``p_i`` of the token at step
``i``, row ``n`` the bonus position. The draft distribution ``q_i`` is
``softmax(draft_logits[i] / temperature)`` (draft logits are stored before
temperature, as in the kernels) or, without draft logits, a point mass at
``d_i``. Each step ``i`` draws one acceptance uniform ``u_i``.

Greedy (temperature 0): accept ``d_i`` while ``d_i == argmax p_i``; the first
mismatch (or a placeholder) emits ``argmax p_i``; if all match, the bonus is
``argmax p_n``.

Standard verification (Leviathan et al., 2023): accept ``d_i`` while
``log p_i(d_i) > log u_i + log q_i(d_i)`` (``log q = 0`` for a point mass); a
placeholder ends verification. At the first rejected step ``tau`` the token is
drawn from ``max(p_tau - q_tau, 0)`` (from ``p_tau`` with ``d_tau`` removed for a
point-mass draft, from ``p_tau`` itself for a placeholder); with no rejection
the bonus is drawn from ``p_n``.

Block verification (Sun et al., 2024, arXiv:2403.10444): the running joint
ratio is ``P_{i+1} = min(P_i * p_i(d_i) / q_i(d_i), 1)`` with ``P_0 = 1``
(placeholders carry the previous value). Step ``i`` gets the threshold
``h_i = R_{i+1} / (R_{i+1} + 1 - P_{i+1})`` (``1`` if the denominator is 0), where
``R_{i+1} = sum_x max(P_{i+1} p_{i+1}(x) - q_{i+1}(x), 0)`` is the residual mass
of the next position (``P_{i+1} (1 - p_{i+1}(d_{i+1}))`` for a point-mass draft),
or ``h_i = P_{i+1}`` when there is no valid next draft. Every step up to the
first placeholder is tested, and the accepted length is the largest ``i + 1``
with ``u_i <= h_i`` (0 if none). At ``tau < n`` the token is drawn from
``max(P_tau p_tau - q_tau, 0)`` (point mass: ``p_tau`` without ``d_tau``;
placeholder: ``p_tau``), else the bonus from ``p_n``.

Given the thresholds, both accepted lengths have closed-form distributions
over independent uniforms (``accepted_length_distribution``), which the tests
and the synthetic harness use to get exact expectations.

Random numbers: ``rejection_sample_reference`` reproduces the kernels' draws
bit for bit: the acceptance uniform is Triton's Philox ``tl.rand`` keyed by the
request seed (mixed with the step index in block mode) and the logit position,
or, with ``use_fp64``, its 53-bit refinement (``tl_rand64``: the same Philox
word for the top 31 bits, a second word for the 22 below); resampling is
Gumbel-max with murmur3 uniforms keyed by (seed, position, token id). Explicit
uniforms may be passed instead.
"""

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

# Smallest acceptance uniform of the fp32 path (gumbel._TL_RAND_MIN).
TL_RAND_MIN = np.float32(4.6566127342e-10)

_M32 = 0xFFFFFFFF
_M64 = 0xFFFFFFFFFFFFFFFF


# ---------------------------------------------------------------------------
# Bit-exact replicas of the kernels' random number generators.
# ---------------------------------------------------------------------------


def _philox_4x32_10(
    c0: int, c1: int, c2: int, c3: int, k0: int, k1: int
) -> tuple[int, int]:
    """First two output words of Triton's philox_impl (10 rounds, 32-bit)."""
    for _ in range(10):
        _c0, _c2 = c0, c2
        c0 = ((0xCD9E8D57 * _c2) >> 32) ^ c1 ^ k0
        c2 = ((0xD2511F53 * _c0) >> 32) ^ c3 ^ k1
        c1 = (0xCD9E8D57 * _c2) & _M32
        c3 = (0xD2511F53 * _c0) & _M32
        k0 = (k0 + 0x9E3779B9) & _M32
        k1 = (k1 + 0xBB67AE85) & _M32
    return c0, c1


def _philox_words(seed: int, offset: int) -> tuple[int, int]:
    """Words 0 and 1 of tl.randint4x(seed, offset) for an offset below 2**32."""
    seed &= _M64
    return _philox_4x32_10(offset & _M32, 0, 0, 0, seed & _M32, seed >> 32)


def _fold31(word: int) -> int:
    """uint_to_uniform_float's bitcast to int32 and ``~x`` for negatives."""
    return (~(word - (1 << 32))) & _M32 if word >= 1 << 31 else word


def philox_uniform32(seed: int, offset: int) -> float:
    """``tl_rand32(seed, offset, includes_zero=False)`` for a scalar offset.

    ``offset`` is taken as the int32 logit position the kernel loads (int64
    offsets would fill the second counter word; positions never need it).
    """
    x = _fold31(_philox_words(seed, offset)[0])
    u = np.float32(np.float32(x) * np.float32(4.6566127342e-10))
    return float(max(u, TL_RAND_MIN))


def philox_uniform64(seed: int, offset: int) -> float:
    """gumbel.tl_rand64: the 53-bit refinement of ``philox_uniform32``."""
    word_0, word_1 = _philox_words(seed, offset)
    random53 = (_fold31(word_0) << 22) | (word_1 >> 10)
    return _uniform64_from_random53(random53)


def _uniform64_from_random53(random53: int) -> float:
    u = (float(random53) + 0.5) * 1.1102230246251565e-16
    return u - 1.1102230246251565e-16 if u == 1.0 else u


def _rotl32(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def _murmur3_mix(h: int, key: int) -> int:
    key = (key * 0xCC9E2D51) & _M32
    key = _rotl32(key, 15)
    key = (key * 0x1B873593) & _M32
    h ^= key
    h = _rotl32(h, 13)
    return (h * 5 + 0xE6546B64) & _M32


def _murmur3_fmix32(h: int) -> int:
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _M32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _M32
    return h ^ (h >> 16)


def murmur3_hash32(seed: int, pos: int, offset: int, domain: int = 0) -> int:
    """gumbel.murmur3_hash32 for scalars."""
    seed &= _M64
    h = domain & _M32
    h = _murmur3_mix(h, seed & _M32)
    h = _murmur3_mix(h, seed >> 32)
    h = _murmur3_mix(h, pos & _M32)
    h = _murmur3_mix(h, offset & _M32)
    return _murmur3_fmix32(h ^ 16)


def murmur3_uniform32(seed: int, pos: int, offset: int) -> np.float32:
    """gumbel.murmur3_uniform32: fp32 uniform in (0, 1)."""
    r = murmur3_hash32(seed, pos, offset)
    hi = np.float32(r >> 16) * np.float32(1.52587890625e-05)
    lo = (np.float32(r & 0xFFFF) + np.float32(0.5)) * np.float32(2.3283064365386963e-10)
    return np.float32(hi + lo)


def murmur3_uniform64(seed: int, pos: int, offset: int) -> float:
    """gumbel.murmur3_uniform64: 53-bit fp64 uniform in (0, 1)."""
    lo = murmur3_hash32(seed, pos, offset)
    hi = murmur3_hash32(seed, pos, offset, domain=0x9E3779B9)
    return _uniform64_from_random53(((hi << 32) | lo) >> 11)


def spec_step_seed(seed: int, step: int) -> int:
    """gumbel.spec_step_seed as an unsigned 64-bit value."""
    return (seed & _M64) ^ ((step << 32) & _M64)


def acceptance_uniform(
    seed: int, pos: int, step: int, use_block_verification: bool, use_fp64: bool
) -> float:
    """The acceptance uniform the kernel draws at one draft step."""
    step_seed = spec_step_seed(seed, step) if use_block_verification else seed
    if use_fp64:
        return philox_uniform64(step_seed, pos)
    return philox_uniform32(step_seed, pos)


def _log1p_neg_stable32(u: np.ndarray) -> np.ndarray:
    v = u.astype(np.float32)
    poly = np.float32(1.0 / 8.0)
    for c in (1 / 7, 1 / 6, 1 / 5, 1 / 4, 1 / 3, 1 / 2, 1.0):
        poly = np.float32(c) + v * poly
    series = -v * poly
    direct = np.log(np.maximum(np.float32(1.0) - v, np.float32(5.960464477539063e-08)))
    return np.where(v < 0.25, series, direct).astype(np.float32)


def gumbel_noise(seed: int, pos: int, vocab_size: int, use_fp64: bool) -> torch.Tensor:
    """Gumbel noise the resampling kernel adds at one position (float64)."""
    if use_fp64:
        u = np.array(
            [murmur3_uniform64(seed, pos, t) for t in range(vocab_size)],
            dtype=np.float64,
        )
        return torch.from_numpy(-np.log(-np.log(u)))
    u = np.array(
        [murmur3_uniform32(seed, pos, t) for t in range(vocab_size)],
        dtype=np.float32,
    )
    noise = -np.log(-_log1p_neg_stable32(u))
    return torch.from_numpy(noise.astype(np.float64))


# ---------------------------------------------------------------------------
# Verification of one request.
# ---------------------------------------------------------------------------


@dataclass
class RequestPlan:
    """Deterministic part of one request's verification (no randomness)."""

    greedy: bool
    # Steps whose acceptance is tested: up to the first placeholder, and for
    # greedy requests the steps up to and including the first mismatch.
    num_verifiable: int
    # Greedy: 1.0 where the draft is the target argmax, else 0.0.
    # Standard: min(1, p_i(d_i) / q_i(d_i)). Block: h_i.
    thresholds: list[float]
    # Block only: log P_{i+1} per step (placeholders carry the last value).
    cumulative_log_p: list[float]


def _log_probs(
    target_logits: torch.Tensor,
    draft_logits: torch.Tensor | None,
    temperature: float,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    target_lp = torch.log_softmax(target_logits.double(), dim=-1)
    draft_lp = None
    if draft_logits is not None:
        draft_lp = torch.log_softmax(draft_logits.double() / temperature, dim=-1)
    return target_lp, draft_lp


def plan_request(
    target_logits: torch.Tensor,
    draft_logits: torch.Tensor | None,
    draft_tokens: list[int],
    temperature: float,
    use_block_verification: bool,
) -> RequestPlan:
    """Acceptance thresholds of one request.

    target_logits: [n + 1, V] processed target logits. draft_logits: [n, V]
    pre-temperature draft logits, or None for point-mass drafts. draft_tokens:
    n ids, -1 for placeholders.
    """
    n = len(draft_tokens)
    assert target_logits.shape[0] == n + 1
    if temperature == 0.0:
        thresholds = []
        for i, d in enumerate(draft_tokens):
            match = d >= 0 and int(torch.argmax(target_logits[i])) == d
            thresholds.append(1.0 if match else 0.0)
            if not match:
                break
        return RequestPlan(True, len(thresholds), thresholds, [])

    target_lp, draft_lp = _log_probs(target_logits, draft_logits, temperature)
    num_verifiable = next((i for i, d in enumerate(draft_tokens) if d < 0), n)

    def log_ratio(i: int) -> float:
        d = draft_tokens[i]
        lq = float(draft_lp[i, d]) if draft_lp is not None else 0.0
        return float(target_lp[i, d]) - lq

    if not use_block_verification:
        thresholds = [min(1.0, math.exp(log_ratio(i))) for i in range(num_verifiable)]
        return RequestPlan(False, num_verifiable, thresholds, [])

    cumulative_log_p = []
    log_p = 0.0
    for i, d in enumerate(draft_tokens):
        if d >= 0:
            log_p = min(log_p + log_ratio(i), 0.0)
        cumulative_log_p.append(log_p)

    thresholds = []
    for i in range(num_verifiable):
        joint = math.exp(cumulative_log_p[i])
        nxt = draft_tokens[i + 1] if i < n - 1 else -1
        if nxt >= 0:
            m_b = target_lp[i + 1].exp()
            if draft_lp is not None:
                m_s = draft_lp[i + 1].exp()
                residual = float(torch.clamp(joint * m_b - m_s, min=0.0).sum())
            else:
                residual = joint * (1.0 - float(m_b[nxt]))
            denom = residual + 1.0 - joint
            thresholds.append(residual / denom if denom > 0.0 else 1.0)
        else:
            thresholds.append(joint)
    return RequestPlan(False, num_verifiable, thresholds, cumulative_log_p)


def accepted_length(
    plan: RequestPlan,
    uniforms: list[float],
    use_block_verification: bool,
) -> int:
    """Number of accepted drafts given the acceptance uniforms."""
    if plan.greedy:
        # Leading argmax matches; the first mismatch emits the target argmax.
        return next(
            (i for i, t in enumerate(plan.thresholds) if t < 1.0), plan.num_verifiable
        )
    if use_block_verification:
        tau = 0
        for i in range(plan.num_verifiable):
            if uniforms[i] <= plan.thresholds[i]:
                tau = i + 1
        return tau
    for i in range(plan.num_verifiable):
        # Kernel test: log p > log u + log q, i.e. u < p / q.
        if not uniforms[i] < plan.thresholds[i]:
            return i
    return plan.num_verifiable


def accepted_length_distribution(
    plan: RequestPlan, use_block_verification: bool
) -> list[float]:
    """P(tau = t) for t = 0 .. n, over independent U(0, 1) uniforms."""
    n_ver = plan.num_verifiable
    probs = [0.0] * (n_ver + 1)
    if plan.greedy:
        probs[accepted_length(plan, [], False)] = 1.0
        return probs
    # Rounding can put a threshold a hair above 1; u <= h treats it as 1.
    h = [min(t, 1.0) for t in plan.thresholds]
    if use_block_verification:
        # tau = t needs u_{t-1} <= h_{t-1} and u_j > h_j for all j >= t.
        tail = 1.0
        for t in range(n_ver, -1, -1):
            probs[t] = (h[t - 1] if t > 0 else 1.0) * tail
            if t > 0:
                tail *= 1.0 - h[t - 1]
        return probs
    prefix = 1.0
    for t in range(n_ver):
        probs[t] = prefix * (1.0 - h[t])
        prefix *= h[t]
    probs[n_ver] = prefix
    return probs


def recovery_probs(
    plan: RequestPlan,
    tau: int,
    target_logits: torch.Tensor,
    draft_logits: torch.Tensor | None,
    draft_tokens: list[int],
    temperature: float,
    use_block_verification: bool,
) -> torch.Tensor:
    """Distribution of the token emitted after ``tau`` accepted drafts."""
    n = len(draft_tokens)
    row = target_logits[tau].double()
    vocab_size = row.shape[0]
    if plan.greedy:
        return torch.nn.functional.one_hot(
            torch.argmax(target_logits[tau]), vocab_size
        ).double()
    p = torch.softmax(row, dim=-1)
    if tau == n or draft_tokens[tau] < 0:
        return p
    d = draft_tokens[tau]
    if draft_logits is None:
        r = p.clone()
        r[d] = 0.0
    else:
        q = torch.softmax(draft_logits[tau].double() / temperature, dim=-1)
        joint = 1.0
        if use_block_verification and tau > 0:
            joint = math.exp(plan.cumulative_log_p[tau - 1])
        r = torch.clamp(joint * p - q, min=0.0)
    total = float(r.sum())
    # An empty residual cannot be reached with continuous uniforms; fall back to
    # the target rather than divide by zero.
    return r / total if total > 0.0 else p


def recovery_logits(
    plan: RequestPlan,
    tau: int,
    target_logits: torch.Tensor,
    draft_logits: torch.Tensor | None,
    draft_tokens: list[int],
    temperature: float,
    use_block_verification: bool,
) -> torch.Tensor:
    """Unnormalised log of ``recovery_probs`` (-inf where it is 0)."""
    probs = recovery_probs(
        plan,
        tau,
        target_logits,
        draft_logits,
        draft_tokens,
        temperature,
        use_block_verification,
    )
    return torch.where(probs > 0, probs.log(), float("-inf"))


def verify_request(
    target_logits: torch.Tensor,
    draft_logits: torch.Tensor | None,
    draft_tokens: list[int],
    temperature: float,
    accept_uniforms: list[float],
    recovery_noise: torch.Tensor | Callable[[int], torch.Tensor] | None,
    use_block_verification: bool,
) -> list[int]:
    """Tokens emitted for one request: accepted drafts plus one more token.

    accept_uniforms: one uniform per draft step. recovery_noise: [V] Gumbel
    noise for the last token, or a function of the accepted length returning
    it (ignored when greedy); the token is argmax(log r + noise), r the
    recovery distribution.
    """
    plan = plan_request(
        target_logits, draft_logits, draft_tokens, temperature, use_block_verification
    )
    tau = accepted_length(plan, accept_uniforms, use_block_verification)
    logits = recovery_logits(
        plan,
        tau,
        target_logits,
        draft_logits,
        draft_tokens,
        temperature,
        use_block_verification,
    )
    if not plan.greedy:
        assert recovery_noise is not None
        if callable(recovery_noise):
            recovery_noise = recovery_noise(tau)
        logits = logits + recovery_noise
    return list(draft_tokens[:tau]) + [int(torch.argmax(logits))]


def rejection_sample_reference(
    target_logits: torch.Tensor,
    draft_logits: torch.Tensor | None,
    draft_sampled: torch.Tensor,
    cu_num_logits: torch.Tensor,
    pos: torch.Tensor,
    idx_mapping: torch.Tensor,
    temperature: torch.Tensor,
    seed: torch.Tensor,
    num_speculative_steps: int,
    use_block_verification: bool = False,
    use_fp64: bool = False,
    accept_uniforms: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Batched reference with the inputs of ``rejection_sample``.

    draft_logits: [max_num_reqs, num_speculative_steps, V] pre-temperature
    draft logits indexed by request state (the DraftLogitsCache values without
    row mapping), or None. accept_uniforms: optional [num_logits] uniforms used
    instead of the kernel's draws (row ``start + i`` for draft step ``i``).
    Returns (sampled [num_reqs, num_speculative_steps + 1] padded with -1,
    num_sampled [num_reqs]).
    """
    cu = cu_num_logits.tolist()
    num_reqs = len(cu) - 1
    target = target_logits.detach().cpu()
    drafts = draft_sampled.tolist()
    positions = pos.tolist()
    temps = temperature.tolist()
    seeds = seed.tolist()
    req_state = idx_mapping.tolist()
    vocab_size = target.shape[1]
    draft = None
    if draft_logits is not None:
        # As the kernels: a padded target vocab is cut to the draft's.
        vocab_size = min(vocab_size, draft_logits.shape[-1])
        draft = draft_logits.detach().cpu()[..., :vocab_size]
    target = target[:, :vocab_size]

    sampled = torch.full((num_reqs, num_speculative_steps + 1), -1, dtype=torch.int64)
    num_sampled = torch.zeros(num_reqs, dtype=torch.int32)
    for r in range(num_reqs):
        start, end = cu[r], cu[r + 1]
        n = end - start - 1
        state = req_state[r]
        req_seed = int(seeds[state])
        if accept_uniforms is not None:
            uniforms = accept_uniforms[start : start + n].double().tolist()
        else:
            uniforms = [
                acceptance_uniform(
                    req_seed, positions[start + i], i, use_block_verification, use_fp64
                )
                for i in range(n)
            ]
        out = verify_request(
            target[start:end],
            draft[state, :n] if draft is not None else None,
            drafts[start + 1 : end],
            float(temps[state]),
            uniforms,
            lambda tau, s=req_seed, p=positions[start:end]: gumbel_noise(
                s, p[tau], vocab_size, use_fp64
            ),
            use_block_verification,
        )
        sampled[r, : len(out)] = torch.tensor(out, dtype=torch.int64)
        num_sampled[r] = len(out)
    return sampled, num_sampled
