# SPDX-License-Identifier: Apache-2.0
"""overlay dspark_draft_attn_tilelang: the TileLang kernel against the fp32 reference on a
GPU (skipped without CUDA or tilelang). The full matrix and the benchmark are
benchmarks/dspark_draft_attn/draft_attn_gpu.py (GPU harness stage tilelang_draft_attn)."""

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
pytest.importorskip("tilelang")

from benchmarks.dspark_draft_attn import draft_attn_gpu as g  # noqa: E402


@pytest.mark.parametrize(
    "num_reqs,num_heads,num_queries",
    # (12, 32, 5) and (8, 64, 5): unsplit wide tiles (32 heads x 2 queries, the last CTA one; 64 x 1)
    [(1, 64, 5), (8, 16, 5), (64, 8, 7), (2, 32, 7), (12, 32, 5), (8, 64, 5)],
)
def test_kernel_matches_reference(num_reqs, num_heads, num_queries):
    res = g.check_case(num_reqs, num_heads, num_queries, seed=num_reqs * 31 + num_heads)
    assert res["idx_src"] == "vllm_triton"
    assert res["finite"] and res["empty_rows_exact_zero"] and res["bitwise_repeatable"], res
    assert res["ok"], res


@pytest.mark.parametrize("sink_kind", ["large", "small", "neginf"])
def test_sink_extremes(sink_kind):
    assert g.check_case(8, 16, 5, seed=5, sink_kind=sink_kind)["ok"]


def test_sm12x_tile_configuration_semantics():
    # the SM12x tiles (heads_per_cta 4, block_kv 32, 128 threads) run here too: same results
    assert g.check_case(8, 64, 7, seed=11, capability=(12, 0))["ok"]


def test_cuda_graph_rewrite_and_replay():
    res = g.check_graph(8, 16, 5, seed=3)
    assert res["ok"], res


@pytest.mark.parametrize("num_heads,num_queries,queries_per_cta", [(32, 5, 2), (16, 5, 4), (64, 7, 1)])
def test_wide_head_groups(num_heads, num_queries, queries_per_cta):
    # unsplit tiles of a wide head group x a few queries (SM90's default at 64 and 32 heads, where
    # large batches take it); a request's last CTA holds fewer queries at 32 x 2 and 16 x 4 (N = 5)
    tile = g.dc.TileConfig(
        heads_per_cta=num_heads, block_kv=64, threads=256, num_stages=1, row_tile=64,
        queries_per_cta=queries_per_cta, q_async=True,
    )
    assert g.dc.tile_rule_violations(tile, num_queries) == []
    res = g.check_case(3, num_heads, num_queries, seed=41 + num_heads, tile=tile)
    assert res["finite"] and res["empty_rows_exact_zero"] and res["bitwise_repeatable"], res
    assert res["ok"], res


@pytest.mark.parametrize(
    "num_reqs,num_heads,num_queries,passes",
    # every query group in one CTA (64 x 1 at N = 7: 7 passes; 16 x 4: the second pass one
    # query), a request's groups over 2 CTAs (3 + 2 passes), and 8 heads x N (one pass)
    [(3, 64, 7, 0), (5, 16, 5, 0), (4, 64, 5, 3), (9, 8, 7, 0), (6, 32, 5, 0)],
)
def test_kv_resident_kernel(num_reqs, num_heads, num_queries, passes):
    # the kernel large batches take on SM90 (launch_tile): the request's window dequantised once
    # into shared memory, the CTA looping over its query groups
    cap = torch.cuda.get_device_capability(0)
    if cap[0] != 9:
        pytest.skip("the KV-resident kernel is SM90's")
    tile = g.dc.resident_tile(g.dc.select_tile_config(num_heads, num_queries, cap), num_heads, num_queries,
                              passes=passes)
    assert g.dc.tile_rule_violations(tile, num_queries) == []
    res = g.check_case(num_reqs, num_heads, num_queries, seed=53 + num_heads + passes, tile=tile)
    assert res["finite"] and res["empty_rows_exact_zero"] and res["bitwise_repeatable"], res
    assert res["ok"], res


@pytest.mark.parametrize("num_reqs,num_heads,num_queries", [(5, 16, 5), (3, 64, 7), (4, 8, 7)])
def test_kv_resident_gathers_give_the_same_bits(num_reqs, num_heads, num_queries):
    # gather="bulk" (a bulk copy a slot's record, dequantised from shared memory; not yet the
    # default) and the default cp.async gather fill the resident tiles with the same values, so
    # the outputs are bitwise equal; the batch has short contexts (dead slots), padding rows and
    # clamped lengths
    from benchmarks.dspark_draft_attn import ablate

    cap = torch.cuda.get_device_capability(0)
    if cap[0] != 9:
        pytest.skip("the KV-resident kernel is SM90's")
    b = g.make_batch(num_reqs, num_heads, num_queries, seed=91 + num_heads)
    tile = g.dc.resident_tile(g.dc.select_tile_config(num_heads, num_queries, cap), num_heads, num_queries)
    cp_async = g.run_kernel(b, torch.empty_like(b.q), tile=tile)
    bulk = torch.empty_like(b.q)
    ablate.jit_resident_variant("bulk_gather")(*ablate.args_for(b, bulk, tile))
    torch.cuda.synchronize()
    assert g.compare(bulk, g.reference(b), b.lens)["ok"]
    assert torch.equal(bulk, cp_async)


def test_kv_resident_kernel_rows_wider_than_its_tiles():
    # index rows with more live slots than the 144 resident rows (never DSpark's window of
    # 128 + N, but the kernel's contract is any lens <= width): dequantised chunk by chunk
    cap = torch.cuda.get_device_capability(0)
    if cap[0] != 9:
        pytest.skip("the KV-resident kernel is SM90's")
    b = g.make_batch(4, 64, 5, seed=71, padding=False, clamp=False, short_ctx=False)
    idx = b.idx.view(b.idx.shape[0], -1)
    live = int(b.lens.max())
    assert live <= 144 < b.width
    # fill the row's tail with (repeated) live slots of the same request: 192 live positions
    idx[:, live:] = idx[:, : b.width - live]
    b.lens.fill_(b.width)
    b.lens[-b.n:] = 150  # one request just past one chunk
    tile = g.dc.resident_tile(g.dc.select_tile_config(64, 5, cap), 64, 5)
    out = torch.empty_like(b.q)
    g.run_kernel(b, out, tile=tile)
    res = g.compare(out, g.reference(b), b.lens)
    assert res["ok"], res


@pytest.mark.parametrize("num_reqs,num_heads", [(1, 64), (64, 16)])
def test_eager_launch_reuses_the_compiled_kernel(num_reqs, num_heads):
    # a split launch (R = 1) and an unsplit one: the second launch of a call signature calls the
    # kernel TileLang compiled for it directly (no new entry), with the new batch's tensors;
    # results bitwise those of TileLang's own call path and right against the reference
    owner = g.dk._DSPARK_DRAFT_ATTN_TILELANG_KERNEL
    first, second = (g.plain_batch(num_reqs, num_heads, seed) for seed in (81, 82))
    owner.reuse_compiled = False
    try:
        want = g.run_kernel(second, torch.empty_like(second.q)).clone()
    finally:
        owner.reuse_compiled = True
    owner._compiled.clear()
    g.run_kernel(first, torch.empty_like(first.q))
    assert len(owner._compiled) == 1  # the compiled kernel kept
    got = g.run_kernel(second, torch.empty_like(second.q))
    assert len(owner._compiled) == 1  # a hit
    assert torch.equal(got, want)
    assert g.compare(got, g.reference(second), second.lens)["ok"]
