# SPDX-License-Identifier: Apache-2.0
"""dspark/0001: the fused DFlash/DSpark prepare-inputs kernel with a query block
longer than num_speculative_tokens (DSpark's trained block).

Extends upstream's tests/v1/spec_decode/test_dflash_prepare_inputs.py harness to
several requests and checks every output against a plain-Python model of the
kernel. With block 5 and N 3 the ids, positions and slot mappings cover the
whole block while exactly N sample rows per request are written; with N equal
to the block the outputs are upstream's.

Runs on the GPU, or on CPU through the Triton interpreter (see conftest.py).
Set DSPARK_BASE_TREE to the root of an unpatched vLLM tree to also compare, for
N equal to the block, with the unpatched kernel itself.
"""

import importlib.util
import os
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch

PAD = -1  # PAD_SLOT_ID
PAD_TOKEN = 123  # parallel_drafting_token_id
KV_BLOCK = 4  # KV cache block size
MAX_MODEL_LEN = 128
SENTINEL_ROWS = 4  # sample rows past max_num_reqs * N, never to be written

# Per request: target positions of its verify step, rejected count, its request
# state, and its block table. Request 0 is upstream's test case.
REQUESTS = [
    dict(positions=[10, 11, 12, 13], rejected=2, state=2, blocks=[0, 0, 7, 8, 9]),
    dict(
        positions=[20, 21, 22, 23],
        rejected=0,
        state=0,
        blocks=[1, 2, 3, 4, 5, 6, 19, 20],
    ),
    dict(positions=[30, 31, 32, 33], rejected=3, state=3, blocks=[0] * 7 + [21, 22]),
]
LAST_SAMPLED = [77, 0, 99, 55]  # by request state


def _run(num_reqs, num_query, num_spec, max_num_reqs, device, kernel=None):
    from vllm.v1.worker.gpu.spec_decode.dflash import speculator

    prepare = speculator.prepare_dflash_inputs
    if kernel is not None:
        prepare = kernel
    reqs = REQUESTS[:num_reqs]
    max_num_tokens = 32
    width = max(len(r["blocks"]) for r in REQUESTS)
    block_table = torch.tensor(
        [r["blocks"] + [0] * (width - len(r["blocks"])) for r in reqs],
        dtype=torch.int32,
        device=device,
    )
    positions = [p for r in reqs for p in r["positions"]]
    query_start = np.cumsum([0] + [len(r["positions"]) for r in reqs])

    def full(n, value, dtype):
        return torch.full((n,), value, dtype=dtype, device=device)

    bufs = SimpleNamespace(
        input_ids=full(max_num_tokens, -7, torch.int32),
        positions=full(max_num_tokens, -7, torch.int64),
        is_padding=torch.zeros(max_num_tokens, dtype=torch.bool, device=device),
        query_start_loc=full(max_num_reqs + 1, -7, torch.int32),
        seq_lens=full(max_num_reqs, -7, torch.int32),
    )
    num_sample_rows = max_num_reqs * num_spec + SENTINEL_ROWS
    out = SimpleNamespace(
        query_slot_mapping=full(max_num_tokens, -7, torch.int64),
        context_positions=full(max_num_tokens, -7, torch.int64),
        context_slot_mapping=full(max_num_tokens, -7, torch.int64),
        sample_indices=full(num_sample_rows, -1, torch.int64),
        sample_pos=full(num_sample_rows, -1, torch.int64),
        sample_idx_mapping=full(num_sample_rows, -1, torch.int64),
        temperature=torch.zeros(4, device=device),
        seeds=torch.zeros(4, dtype=torch.int64, device=device),
    )
    input_batch = SimpleNamespace(
        num_reqs=num_reqs,
        num_scheduled_tokens=np.array([len(r["positions"]) for r in reqs], np.int32),
        positions=torch.tensor(positions, dtype=torch.int64, device=device),
        query_start_loc=torch.tensor(query_start, dtype=torch.int32, device=device),
        idx_mapping=torch.tensor(
            [r["state"] for r in reqs], dtype=torch.int32, device=device
        ),
    )
    prepare(
        bufs,
        out.query_slot_mapping,
        out.context_positions,
        out.context_slot_mapping,
        out.sample_indices,
        out.sample_pos,
        out.sample_idx_mapping,
        out.temperature,
        out.seeds,
        input_batch,
        torch.ones(num_reqs, dtype=torch.int32, device=device),  # num_sampled
        torch.tensor([r["rejected"] for r in reqs], dtype=torch.int32, device=device),
        torch.tensor(LAST_SAMPLED, dtype=torch.int64, device=device),
        torch.zeros(4, dtype=torch.int64, device=device),  # next_prefill_tokens
        torch.tensor([0.0, 0.5, 1.0, 0.0], device=device),
        torch.tensor([3, 5, 17, 0], dtype=torch.int64, device=device),
        block_table,
        KV_BLOCK,
        0,  # cp_rank
        1,  # cp_size
        1,  # cp_interleave
        PAD_TOKEN,
        num_query,  # num_query_per_req: DSparkSpeculator passes its query block
        num_spec,  # num_speculative_steps: N
        max_num_reqs,
        max_num_tokens,
        MAX_MODEL_LEN,
        True,  # sample_from_anchor (DSpark)
        num_reqs,
    )
    if device == "cuda":
        torch.cuda.synchronize()
    result = {k: v.cpu() for k, v in vars(bufs).items()}
    result.update({k: v.cpu() for k, v in vars(out).items()})
    return result, num_sample_rows, max_num_tokens


def _reference(num_reqs, num_query, num_spec, max_num_reqs):
    """Plain-Python model of _prepare_dflash_inputs_kernel for DSpark (sampling
    from the anchor, no context parallelism): a block of num_query queries per
    request, the first num_spec of them sampled."""
    num_sample_rows = max_num_reqs * num_spec + SENTINEL_ROWS
    max_num_tokens = 32
    ref = dict(
        input_ids=[0] * max_num_tokens,
        positions=[0] * max_num_tokens,
        is_padding=[True] * max_num_tokens,
        query_slot_mapping=[PAD] * max_num_tokens,
        query_start_loc=[num_reqs * num_query] * (max_num_reqs + 1),
        seq_lens=[0] * max_num_reqs,
        sample_indices=[0] * (max_num_reqs * num_spec) + [-1] * SENTINEL_ROWS,
        sample_pos=[0] * (max_num_reqs * num_spec) + [-1] * SENTINEL_ROWS,
        sample_idx_mapping=[-1] * num_sample_rows,
        context_positions={},
        context_slot_mapping={},
    )

    def slot(blocks, pos):
        block_num = min(pos // KV_BLOCK, len(blocks) - 1)
        block_id = blocks[block_num] if block_num < len(blocks) else 0
        return PAD if block_id == 0 else block_id * KV_BLOCK + pos % KV_BLOCK

    ctx_start = 0
    for i, r in enumerate(REQUESTS[:num_reqs]):
        width = max(len(q["blocks"]) for q in REQUESTS)
        blocks = r["blocks"] + [0] * (width - len(r["blocks"]))
        num_valid = len(r["positions"]) - r["rejected"]
        for j, pos in enumerate(r["positions"]):
            valid = j < num_valid
            ref["context_positions"][ctx_start + j] = pos if valid else 0
            ref["context_slot_mapping"][ctx_start + j] = (
                slot(blocks, pos) if valid else PAD
            )
        ctx_start += len(r["positions"])
        last_valid = r["positions"][num_valid - 1]
        for k in range(num_query):
            q = i * num_query + k
            pos = last_valid + 1 + k
            ref["input_ids"][q] = LAST_SAMPLED[r["state"]] if k == 0 else PAD_TOKEN
            ref["positions"][q] = min(pos, MAX_MODEL_LEN - 1)
            ref["is_padding"][q] = False
            ref["query_slot_mapping"][q] = slot(blocks, pos)
            if k < num_spec:
                row = i * num_spec + k
                ref["sample_indices"][row] = q
                ref["sample_pos"][row] = pos + 1
                ref["sample_idx_mapping"][row] = r["state"]
        ref["query_start_loc"][i] = i * num_query
        ref["seq_lens"][i] = min(last_valid + 1 + num_query, MAX_MODEL_LEN)
    return ref


def _check_against_reference(out, num_reqs, num_query, num_spec, max_num_reqs):
    ref = _reference(num_reqs, num_query, num_spec, max_num_reqs)
    for key in ("context_positions", "context_slot_mapping"):
        got = {i: out[key][i].item() for i in ref[key]}
        assert got == ref[key], key
    for key, want in ref.items():
        if key in ("context_positions", "context_slot_mapping"):
            continue
        assert out[key].tolist() == want, key


@pytest.mark.parametrize("num_reqs,max_num_reqs", [(2, 2), (3, 4)])
def test_block_5_n_3_covers_block_samples_n(kernel_device, num_reqs, max_num_reqs):
    out, _, _ = _run(num_reqs, 5, 3, max_num_reqs, kernel_device)
    # Request 0 (upstream's case): the whole block of 5 is laid out.
    assert out["input_ids"][:5].tolist() == [99] + [PAD_TOKEN] * 4
    assert out["positions"][:5].tolist() == [12, 13, 14, 15, 16]
    assert out["query_slot_mapping"][:5].tolist() == [32, 33, 34, 35, 36]
    assert out["seq_lens"][0].item() == 17
    # Only N = 3 sample rows per request; the block's last two positions are
    # not sampled, and nothing lands in another request's or past the rows.
    assert out["sample_indices"][:6].tolist() == [0, 1, 2, 5, 6, 7]
    assert out["sample_pos"][:6].tolist() == [13, 14, 15, 25, 26, 27]
    assert out["sample_idx_mapping"][:6].tolist() == [2, 2, 2, 0, 0, 0]
    assert (out["sample_idx_mapping"][num_reqs * 3 :] == -1).all()
    _check_against_reference(out, num_reqs, 5, 3, max_num_reqs)


@pytest.mark.parametrize("n", [3, 5])
def test_n_equal_block_is_upstream_layout(kernel_device, n):
    # Query block N, all N sampled: upstream 0.34.0's layout.
    out, _, _ = _run(3, n, n, 4, kernel_device)
    _check_against_reference(out, 3, n, n, 4)


def _load_unpatched_prepare():
    root = os.environ.get("DSPARK_BASE_TREE")
    if not root:
        pytest.skip("DSPARK_BASE_TREE (an unpatched vLLM tree) is not set")
    path = os.path.join(root, "vllm/v1/worker/gpu/spec_decode/dflash/speculator.py")
    spec = importlib.util.spec_from_file_location("_unpatched_dflash", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module.prepare_dflash_inputs


@pytest.mark.parametrize("num_reqs,max_num_reqs", [(1, 4), (3, 4), (2, 2)])
def test_n_equal_block_identical_to_unpatched_kernel(
    kernel_device, num_reqs, max_num_reqs
):
    unpatched = _load_unpatched_prepare()
    for n in (3, 5):
        ours, _, _ = _run(num_reqs, n, n, max_num_reqs, kernel_device)
        theirs, _, _ = _run(num_reqs, n, n, max_num_reqs, kernel_device, unpatched)
        for key in ours:
            assert torch.equal(ours[key], theirs[key]), key
