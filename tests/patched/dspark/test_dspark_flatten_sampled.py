# SPDX-License-Identifier: Apache-2.0
"""dspark/0003: the vectorised _flatten_sampled_kernel equals the scalar loop.

The kernel copies each request's num_sampled verified tokens to its logits
rows (cu_num_logits) for the logprobs path. Randomised against the scalar loop
upstream 0.34.0 used (copied below) and a plain-Python reference, including
requests that sampled nothing, full rows, uneven logits spans and a strided
`sampled`. GPU, or CPU through the Triton interpreter (see conftest.py).
"""

import pytest
import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - no Triton at all
    triton = None


if triton is not None:

    @triton.jit
    def _scalar_loop_flatten_kernel(
        flat_sampled_ptr,
        sampled_ptr,
        sampled_stride,
        num_sampled_ptr,
        cu_num_logits_ptr,
    ):
        # vLLM 0.34.0's _flatten_sampled_kernel.
        req_idx = tl.program_id(0)
        start_idx = tl.load(cu_num_logits_ptr + req_idx)
        num_sampled = tl.load(num_sampled_ptr + req_idx)
        for i in range(num_sampled):
            token_id = tl.load(sampled_ptr + req_idx * sampled_stride + i)
            tl.store(flat_sampled_ptr + start_idx + i, token_id)


def _inputs(num_reqs, num_cols, gen, device, dtype, edge=None, strided=False):
    num_sampled = torch.randint(0, num_cols + 1, (num_reqs,), generator=gen)
    if edge == "zero":
        num_sampled.zero_()
    elif edge == "full":
        num_sampled.fill_(num_cols)
    elif edge == "mixed":
        num_sampled[::2] = 0
        num_sampled[1::2] = num_cols
    # Each request's logits span holds at least its sampled tokens; under
    # adaptive verification spans differ per request.
    span = num_sampled + torch.randint(0, 3, (num_reqs,), generator=gen)
    span = torch.maximum(span, torch.ones_like(span))
    cu_num_logits = torch.zeros(num_reqs + 1, dtype=torch.int32)
    cu_num_logits[1:] = torch.cumsum(span, 0)
    width = num_cols + 3 if strided else num_cols
    sampled = torch.randint(0, 2**31 - 1, (num_reqs, width), generator=gen).to(dtype)
    if strided:
        sampled = sampled[:, 1 : 1 + num_cols]
    return (
        sampled.to(device),
        num_sampled.to(torch.int32).to(device),
        cu_num_logits.to(device),
        int(cu_num_logits[-1]),
    )


def _reference(sampled, num_sampled, cu_num_logits, num_logits):
    flat = torch.zeros(num_logits, dtype=sampled.dtype)
    for r in range(sampled.shape[0]):
        n, start = int(num_sampled[r]), int(cu_num_logits[r])
        flat[start : start + n] = sampled[r, :n].cpu()
    return flat


def _run(kernel, sampled, num_sampled, cu_num_logits, num_logits, **kwargs):
    flat = torch.zeros(num_logits, dtype=sampled.dtype, device=sampled.device)
    kernel[(sampled.shape[0],)](
        flat, sampled, sampled.stride(0), num_sampled, cu_num_logits, **kwargs
    )
    return flat.cpu()


@pytest.mark.parametrize("num_spec", [1, 3, 5, 7, 8])
@pytest.mark.parametrize("edge", [None, "zero", "full", "mixed"])
def test_vectorised_equals_scalar_loop(kernel_device, num_spec, edge):
    from vllm.v1.worker.gpu.spec_decode.rejection_sampler import (
        _flatten_sampled_kernel,
    )

    gen = torch.Generator().manual_seed(1000 * num_spec + len(edge or ""))
    num_cols = num_spec + 1
    for trial in range(3):
        num_reqs = (1, 7, 33)[trial]
        for dtype in (torch.int64, torch.int32):
            for strided in (False, True):
                args = _inputs(
                    num_reqs, num_cols, gen, kernel_device, dtype, edge, strided
                )
                ours = _run(
                    _flatten_sampled_kernel,
                    *args,
                    BLOCK_SIZE=triton.next_power_of_2(num_cols),
                    num_warps=1,
                )
                loop = _run(_scalar_loop_flatten_kernel, *args, num_warps=1)
                assert torch.equal(ours, loop)
                assert torch.equal(ours, _reference(*args))


def test_kernel_has_no_per_token_loop():
    """Structural: one masked block per request, sized by a constexpr (the
    equality test above also passes on the scalar loop it replaces)."""
    import inspect

    from vllm.v1.worker.gpu.spec_decode.rejection_sampler import (
        _flatten_sampled_kernel,
    )

    fn = getattr(_flatten_sampled_kernel, "fn", _flatten_sampled_kernel)
    params = inspect.signature(fn).parameters
    assert "BLOCK_SIZE" in params
    assert "constexpr" in str(params["BLOCK_SIZE"].annotation)
    assert "range(num_sampled)" not in inspect.getsource(fn)
