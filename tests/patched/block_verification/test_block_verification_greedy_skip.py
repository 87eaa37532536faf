# SPDX-License-Identifier: Apache-2.0
"""Patch block-verification/0001: RejectionSampler._verify skips the block
verification prep kernels when every request of the batch is greedy.

Drives the real _verify with a stub sampler (as upstream's
test_verify_rejects_unproposed_drafts does) whose sampling states are a real
SamplingStates with host-side temperatures, and counts kernel launches.
"""

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from vllm.v1.worker.gpu.sample.states import SamplingStates
from vllm.v1.worker.gpu.spec_decode import rejection_sampler_utils as rsu
from vllm.v1.worker.gpu.spec_decode.rejection_sampler import RejectionSampler

from tests.patched.block_verification.bv_inputs import draft_cache, make_batch, run_kernel, valid_rows

PREP_KERNELS = (
    "_compute_cumulative_log_p_kernel",
    "_compute_local_residual_mass_kernel",
)
K, V = 3, 37


class LaunchCounter:
    def __init__(self, kernel):
        self.kernel = kernel
        self.launches = 0

    def __getitem__(self, grid):
        self.launches += 1
        return self.kernel[grid]


@pytest.fixture
def prep_launches(monkeypatch) -> dict[str, LaunchCounter]:
    counters = {}
    for name in PREP_KERNELS:
        counters[name] = LaunchCounter(getattr(rsu, name))
        monkeypatch.setattr(rsu, name, counters[name])
    return counters


def _count(counters: dict[str, LaunchCounter]) -> int:
    return sum(c.launches for c in counters.values())


def _sampling_states(temperature: torch.Tensor, seed: torch.Tensor) -> SamplingStates:
    # SamplingStates.__init__ needs pinned memory (a GPU); only the
    # temperature and seed buffers are read here.
    states = object.__new__(SamplingStates)
    states.temperature = SimpleNamespace(
        np=temperature.cpu().numpy().copy(), gpu=temperature
    )
    states.seeds = SimpleNamespace(gpu=seed)
    return states


def _rejection_sampler(kw: dict, sampling_states) -> RejectionSampler:
    num_reqs = kw["cu_num_logits"].shape[0] - 1
    rs = object.__new__(RejectionSampler)
    rs.sampler = SimpleNamespace(
        apply_sampling_params=lambda logits, *args: logits,
        sampling_states=sampling_states,
        use_fp64_gumbel=False,
        trace_replay_state=None,
        may_mask_logits=np.zeros(num_reqs, dtype=bool),
    )
    rs.num_speculative_steps = kw["num_speculative_steps"]
    rs.synthetic_conditional_rates = None
    rs.use_block_verification = True
    rs.fly_window_size = 0
    rs.fly_entropy_threshold = 0.3
    rs.fly_entropy_top_k = 3
    rs.watermark_key = None
    return rs


def _verify(rs: RejectionSampler, kw: dict, idx_mapping_np):
    _, sampled, num_sampled = rs._verify(
        kw["target_logits"],
        draft_cache(kw["draft_logits"]),
        kw["draft_sampled"],
        kw["pos"],
        kw["cu_num_logits"],
        kw["idx_mapping"],
        idx_mapping_np,
        kw["expanded_idx_mapping"],
        kw["expanded_local_pos"],
        None,
    )
    return sampled.cpu(), num_sampled.cpu()


def test_sampling_states_all_greedy():
    states = _sampling_states(
        torch.tensor([0.0, 0.0, 0.7, 0.0]), torch.zeros(4, dtype=torch.int64)
    )
    assert states.all_greedy(np.array([0, 1, 3]))
    assert not states.all_greedy(np.array([0, 2]))
    assert not states.all_greedy(np.array([2]))
    assert states.any_greedy(np.array([0, 2]))


@pytest.mark.parametrize("has_draft_logits", [True, False])
def test_all_greedy_batch_skips_block_prep(
    kernel_device: str, prep_launches, has_draft_logits: bool
):
    kw = make_batch(
        [0.0] * 5,
        K,
        V,
        draft_noise=0.5,
        has_draft_logits=has_draft_logits,
        placeholders={2: [1]},
        device=kernel_device,
    )
    # Block mode without the skip: what the upstream _verify runs.
    expected, expected_num = run_kernel(kw, use_block_verification=True)
    assert _count(prep_launches) >= 1
    # The greedy drafter matches the target argmax on some steps.
    assert max(expected_num.tolist()) > 1

    before = _count(prep_launches)
    rs = _rejection_sampler(kw, _sampling_states(kw["temperature"], kw["seed"]))
    sampled, num_sampled = _verify(rs, kw, kw["idx_mapping"].cpu().numpy())
    assert _count(prep_launches) == before, "block prep ran for an all-greedy batch"
    assert num_sampled.tolist() == expected_num.tolist()
    assert valid_rows(sampled, num_sampled) == valid_rows(expected, expected_num)


@pytest.mark.parametrize("has_draft_logits", [True, False])
def test_mixed_batch_keeps_block_verification(
    kernel_device: str, prep_launches, has_draft_logits: bool
):
    kw = make_batch(
        [0.0, 1.0, 0.0, 0.7],
        K,
        V,
        draft_noise=2.0,
        has_draft_logits=has_draft_logits,
        device=kernel_device,
    )
    expected, expected_num = run_kernel(kw, use_block_verification=True)
    before = _count(prep_launches)
    rs = _rejection_sampler(kw, _sampling_states(kw["temperature"], kw["seed"]))
    sampled, num_sampled = _verify(rs, kw, kw["idx_mapping"].cpu().numpy())
    assert _count(prep_launches) == 2 * before  # same launches as block mode
    assert num_sampled.tolist() == expected_num.tolist()
    assert valid_rows(sampled, num_sampled) == valid_rows(expected, expected_num)


def test_verify_without_host_state_keeps_block_mode(kernel_device: str, prep_launches):
    """idx_mapping_np=None with a sampler stub that has no host temperatures
    (upstream's test_verify_rejects_unproposed_drafts) keeps block mode."""
    kw = make_batch([0.0] * 3, K, V, device=kernel_device)
    expected, expected_num = run_kernel(kw, use_block_verification=True)
    stub_states = SimpleNamespace(
        temperature=SimpleNamespace(gpu=kw["temperature"]),
        seeds=SimpleNamespace(gpu=kw["seed"]),
    )
    before = _count(prep_launches)
    rs = _rejection_sampler(kw, stub_states)
    sampled, num_sampled = _verify(rs, kw, None)
    assert _count(prep_launches) > before
    assert valid_rows(sampled, num_sampled) == valid_rows(expected, expected_num)
