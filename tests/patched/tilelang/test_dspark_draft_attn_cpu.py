# SPDX-License-Identifier: Apache-2.0
"""overlay dspark_draft_attn_common / _tilelang on CPU: the fp32 reference against upstream's
own eager FlashMLA-style reference and fp8_ds_mla packer (tests/kernels/
test_deepseek_v4_cpu_kernels.py of the tree, its functions loaded by source because that
module imports vLLM's compiled CPU ops), the reference on batches built by upstream's DSpark
index kernel (Triton interpreter on CPU), tile configurations (SM120's 101,376 B budget, the
warp rules) and the kernel's compile keys.

No CUDA and possibly no tilelang here: the kernel itself runs in test_dspark_draft_attn_gpu.py.
Where tilelang is missing, the compile-key test replaces ``vllm.tilelang_utils`` with a stand-in
whose ``tilelang_jit`` returns the function undecorated (marked below); the keys come from the
real owner class.
"""

import ast
import dataclasses
import importlib
import json
import math
import os
import sys
import types
from pathlib import Path

import pytest
import torch
import vllm
from vllm.models.deepseek_v4.nvidia.ops import dspark_draft_attn_common as dc

TREE = Path(vllm.__file__).resolve().parents[1]
UPSTREAM_TEST = TREE / "tests/kernels/test_deepseek_v4_cpu_kernels.py"


def _load_upstream(names: set[str]) -> dict:
    """Upstream's module-level constants and the named functions, without its imports."""
    src = UPSTREAM_TEST.read_text()
    tree = ast.parse(src)
    ns: dict = {
        "torch": torch,
        "NOPE_DIM": dc.NOPE_DIM,
        "ROPE_DIM": dc.ROPE_DIM,
        "HEAD_DIM": dc.HEAD_DIM,
        "QUANT_BLOCK": dc.QUANT_BLOCK,
    }
    keep = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in names:
            keep.append(node)
        elif isinstance(node, ast.Assign) and all(
            isinstance(t, ast.Name) and t.id in {"SCALE_BYTES_PER_TOKEN", "TOKEN_DATA_BYTES", "FP8_MAX"}
            for t in node.targets
        ):
            keep.append(node)
    found = {n.name for n in keep if isinstance(n, ast.FunctionDef)}
    assert found == names, f"upstream test lost {names - found}"
    exec(compile(ast.Module(body=keep, type_ignores=[]), str(UPSTREAM_TEST), "exec"), ns)
    return ns


@pytest.fixture(scope="module")
def upstream():
    return _load_upstream({"_make_cache", "_pack_flash_mla_cache", "_flash_mla_eager"})


@pytest.mark.parametrize("num_heads,num_queries,block_size", [(64, 5, 64), (8, 7, 64), (16, 5, 16)])
def test_reference_matches_upstream_eager(upstream, num_heads, num_queries, block_size):
    g = torch.Generator().manual_seed(num_heads + num_queries)
    n_slots = 300
    kv = torch.randn(n_slots, dc.HEAD_DIM, generator=g)
    kv[7] = 0.0  # an all-zero token: scale byte at its clamp, e4m3 zeros
    kv[8, :64] *= 1e-3  # small values next to large ones: e4m3 subnormals in that chunk
    cache, dequant = upstream["_pack_flash_mla_cache"](kv, block_size)
    page_bytes = cache.stride(0)  # upstream's packer: block_size * 584, not padded to 576
    num_reqs = 3
    T = num_reqs * num_queries
    width = dc.dspark_index_width(128, num_queries)
    idx = torch.full((T, 1, width), -1, dtype=torch.int32)
    lens = torch.zeros(T, dtype=torch.int32)
    for r, n_live in enumerate((133, 40, 0)):  # full window, short context, padding request
        slots = torch.randperm(n_slots, generator=g)[:n_live].int()
        idx[r * num_queries : (r + 1) * num_queries, 0, :n_live] = slots
        lens[r * num_queries : (r + 1) * num_queries] = n_live
    q = torch.randn(T, num_heads, dc.HEAD_DIM, generator=g).bfloat16()
    sink = torch.randn(num_heads, generator=g)
    sink[0] = -math.inf
    sink[1] = 20.0
    scale = dc.HEAD_DIM**-0.5

    ours = dc.dspark_draft_attention_ref(
        q, cache, idx, lens, sink, scale=scale, block_size=block_size, page_bytes=page_bytes
    )
    # upstream's eager reference: -1 marks dead slots; empty lists = no slot at all
    live = torch.arange(width)[None] < lens[:, None]
    slots = torch.where(live, idx[:, 0], -1)
    theirs = upstream["_flash_mla_eager"](
        q, dequant, slots, dequant[:0], torch.empty(T, 0, dtype=torch.int32), sink, scale
    ).float()
    full = lens > 0
    torch.testing.assert_close(ours[full], theirs[full], atol=2e-2, rtol=2e-2)
    assert (ours[~full] == 0).all()  # empty rows: zeros (upstream's gives NaN for a -inf sink)
    # the dequantisation itself is exact against upstream's packer
    all_slots = torch.arange(n_slots)
    torch.testing.assert_close(dc.dequant_fp8_ds_mla(cache, all_slots, block_size, page_bytes), dequant, atol=0, rtol=0)


def test_reference_on_upstream_index_kernel_batch():
    """A batch as the draft builds it (upstream's DSpark index kernel under the Triton
    interpreter, real page stride 37,440 B): every request's N rows share one index list,
    padding requests get len 0, and the per-request reference (the kernel's m-fusion) equals
    the per-token one."""
    from benchmarks.dspark_draft_attn import draft_attn_gpu as g

    b = g.make_batch(6, 16, 5, seed=3)
    assert b.idx_src == "vllm_triton"
    assert g.PAGE == 37_440 and b.width == 192
    rows = b.idx.view(6, 5, -1)
    assert (rows == rows[:, :1]).all(), "N rows of a request must share the list"
    assert (b.lens.view(6, 5)[-1] == 0).all() and (b.lens.view(6, 5)[0] > 0).all()
    ref = g.reference(b)
    per_req = torch.cat(
        [
            dc.dspark_draft_attention_ref(
                b.q[r * 5 : (r + 1) * 5],
                b.pool,
                b.idx[r * 5 : r * 5 + 1].expand(5, 1, -1),
                b.lens[r * 5 : (r + 1) * 5],
                b.sink,
                scale=g.SCALE,
                block_size=g.BS,
                page_bytes=g.PAGE,
            )
            for r in range(6)
        ]
    )
    # bitwise on CPU; on CUDA einsums of different batch shapes take different cuBLAS
    # algorithms (6e-7 apart on the H200)
    tol = 0.0 if ref.device.type == "cpu" else 1e-5
    torch.testing.assert_close(ref, per_req, atol=tol, rtol=tol)
    assert g.compare(ref.bfloat16(), ref, b.lens)["ok"]
    bad = ref.bfloat16().clone()
    bad[0, 0, 0] += 0.5
    assert not g.compare(bad, ref, b.lens)["ok"], "the check must catch a wrong value"


@pytest.mark.parametrize("num_queries", [5, 7])
@pytest.mark.parametrize("num_heads", [64, 32, 16, 8])
@pytest.mark.parametrize("capability", [(9, 0), (12, 0), (12, 1), (10, 0)])
def test_tile_config_fits_and_follows_warp_rules(num_heads, num_queries, capability):
    cfg = dc.select_tile_config(num_heads, num_queries, capability)
    budget = dc.SM120_SMEM_BYTES if capability[0] == 12 else dc.SM90_SMEM_BYTES
    assert dc._tile_smem_bytes(num_queries, cfg) <= budget
    assert num_heads % cfg.heads_per_cta == 0
    assert dc.tile_rule_violations(cfg, num_queries) == []
    # wgmma (rows padded to 64) only where TileLang lowers to it: SM90
    assert cfg.row_tile == (64 if capability[0] == 9 else 16)
    if capability[0] == 12:
        # two stages do not fit 101,376 B with this shape: one stage, 89,248 B in the
        # generated kernel (N=7, tilelang 0.1.12; the estimate, 92,576 B, errs on the safe side)
        assert (cfg.heads_per_cta, cfg.block_kv, cfg.threads, cfg.num_stages) == (4, 32, 128, 1)
        assert dc.smem_bytes(num_queries, 4, 32, 2) > budget
    else:
        # SM90: two stages fit but measured slower on the H200 (2026-12-03 sweep)
        assert cfg.num_stages == 1 and dc.smem_bytes(num_queries, 8, 64, 2, cfg.row_tile) <= budget
def test_tile_config_rejects_bad_heads():
    with pytest.raises(ValueError, match="multiple of 8"):
        dc.select_tile_config(12, 5, (9, 0))


def test_layout_constants():
    assert dc.fp8_ds_mla_page_bytes(64) == 37_440
    assert dc.dspark_index_width(128, 5) == 192 and dc.dspark_index_width(128, 7) == 192
    from vllm.v1.attention.backends.mla.compressor_utils import get_dspark_swa_index_width

    for n in (1, 5, 7, 64):
        assert dc.dspark_index_width(128, n) == get_dspark_swa_index_width(128, n)


@pytest.fixture
def kernel_module(monkeypatch):
    name = "vllm.models.deepseek_v4.nvidia.ops.dspark_draft_attn_tilelang"
    try:
        import tilelang  # noqa: F401
    except ImportError:
        # stand-in (no tilelang in CPU CI): tilelang_jit leaves the kernel undecorated
        stub = types.ModuleType("vllm.tilelang_utils")
        stub.T = types.SimpleNamespace(macro=lambda fn: fn)  # module-level @T.macro
        stub.tilelang_jit = lambda fn: fn
        monkeypatch.setitem(sys.modules, "vllm.tilelang_utils", stub)
    monkeypatch.delitem(sys.modules, name, raising=False)
    return importlib.import_module(name)


def test_compile_keys(kernel_module):
    owner = kernel_module.DSparkDraftAttnTileLangKernel()
    page = dc.fp8_ds_mla_page_bytes(64)
    kw = dict(num_heads=16, num_queries=5, window_size=128, block_size=64, page_bytes=page, scale=512**-0.5)
    # SM90: the unsplit key, the split ones small batches pick (133 live slots: 5 32-token or 3
    # 64-token tiles, one CTA each; 16 heads x 1 query, then 4 heads, then 8 x all queries) and
    # the KV-resident one large batches pick (16 heads x 4 queries a pass, 2 passes a CTA)
    k90, *split, kres = owner.get_warmup_keys(**kw, capability=(9, 0))
    assert (kres.resident, kres.heads_per_cta, kres.queries_per_cta, kres.passes) == (True, 16, 4, 0)
    assert (kres.block_kv, kres.resident_tiles, kres.tail_kv, kres.kv_splits) == (64, 2, 16, 1)
    assert owner.kernel(kres) is kernel_module.dspark_draft_attn_resident_tilelang
    assert not any(k.resident for k in (k90, *split))
    # 8 heads: the resident tile would be one pass a CTA (8 x 8 rows), which never pays
    keys8 = owner.get_warmup_keys(**{**kw, "num_heads": 8}, capability=(9, 0))
    assert keys8 and not any(k.resident for k in keys8)
    assert not any(k.resident for k in owner.get_warmup_keys(**kw, capability=(12, 0)))
    # the live slots of a row (window + N = 133), not its width (192), size the splits
    assert [(k.heads_per_cta, k.queries_per_cta, k.block_kv, k.kv_splits) for k in split] == [
        (16, 1, 32, 5), (4, 5, 32, 5), (4, 5, 64, 3), (8, 5, 64, 3)
    ]
    # every split key with the merge's prefetch (the L2 merge's partial outputs copied in first)
    assert split[-1] == dataclasses.replace(k90, kv_splits=3, merge_prefetch=True)
    assert all(k.merge_prefetch for k in split) and not k90.merge_prefetch
    assert k90.kv_splits == 1
    (k120,) = owner.get_warmup_keys(**kw, capability=(12, 0))  # SM12x never splits
    assert k120.kv_splits == 1
    # unsplit: 8 heads x 5 queries (16 x 4 would need no fewer CTAs: _fill_wgmma_rows)
    assert (k90.width, k90.heads_per_cta, k90.block_kv, k90.threads, k90.num_stages) == (192, 8, 64, 256, 1)
    assert k90.queries_per_cta == k120.queries_per_cta == 5
    assert (k90.row_tile, k120.row_tile) == (64, 16)
    assert (k90.q_async, k120.q_async) == (True, False)  # SM12x keeps the untested-there path
    # the owner picks the kernel function from the key, as upstream's mHC owners do
    resident = owner.dispatch(
        num_heads=16, num_queries=5, width=192, block_size=64, page_bytes=page, scale=512**-0.5,
        capability=(9, 0), tile=dc.resident_tile(dc.select_tile_config(16, 5, (9, 0)), 16, 5),
    )
    assert (resident.resident, resident.queries_per_cta, resident.heads_per_cta) == (True, 4, 16)
    assert owner.kernel(resident) is kernel_module.dspark_draft_attn_resident_tilelang
    assert owner.kernel(k90) is kernel_module.dspark_draft_attn_tilelang
    assert k90.reduce_batch == k120.reduce_batch == 1
    assert (k120.heads_per_cta, k120.block_kv, k120.threads, k120.num_stages) == (4, 32, 128, 1)
    assert k90 != k120 and hash(k90) != hash(k120)
    inputs = owner.warmup_inputs(k90)
    assert inputs["compile_key"] == k90
    assert inputs["q"].shape == (1, 5, 16, 512) and inputs["out"].shape == (1, 5, 16, 512)
    assert inputs["indices"].shape == (1, 5, 192) and inputs["lens"].shape == (1, 5)
    assert inputs["kv_fp8"].shape == (1, page) and inputs["kv_bf16"].shape == (1, page // 2)
    assert inputs["kv_i64"].shape == (1, page // 8) and inputs["kv_i64"].dtype == torch.int64
    assert inputs["kv_fp8"].dtype == torch.float8_e4m3fn and inputs["attn_sink"].shape == (16,)
    assert inputs["part_o"].shape == (1, 64, 512) and inputs["part_ml"].shape == (1, 2, 64)
    # one key per (heads, N, arch class): 8 keys for the four TP sizes x N in {5, 7} on SM90
    keys = {
        owner.dispatch(
            num_heads=h, num_queries=n, width=192, block_size=64, page_bytes=page, scale=512**-0.5, capability=(9, 0)
        )
        for h in (64, 32, 16, 8)
        for n in (5, 7)
    }
    assert len(keys) == 8


def test_compile_key_carries_the_kernel_variants(kernel_module):
    """q_async (the Q load) and merge_prefetch (the split's merge) change the generated code,
    so they must reach the key (and the launch arguments); a key without one would serve one
    variant's cached kernel for the other."""
    owner = kernel_module.DSparkDraftAttnTileLangKernel()
    kw = dict(num_heads=16, num_queries=5, width=192, block_size=64, page_bytes=dc.fp8_ds_mla_page_bytes(64),
              scale=512**-0.5, capability=(9, 0))
    default = owner.dispatch(**kw)
    tile = dc.select_tile_config(16, 5, (9, 0))
    for field in ("q_async", "merge_prefetch"):
        flip = {field: not getattr(tile, field)}
        flipped = owner.dispatch(**kw, tile=dataclasses.replace(tile, **flip))
        assert flipped == dataclasses.replace(default, **flip) and flipped != default
    # the query grouping too (and it reaches the plain kernel's launch arguments, last)
    four = owner.dispatch(**kw, tile=dataclasses.replace(tile, heads_per_cta=16, queries_per_cta=4))
    assert (four.queries_per_cta, default.queries_per_cta) == (4, 5)
    tensors = {name: None for name in ("q", "kv_fp8", "kv_i64", "kv_bf16", "indices", "lens", "attn_sink", "out",
                                       "part_o", "part_ml")}
    for key in (default, four):
        _, args = type(owner).__call__.__wrapped__(owner, **tensors, compile_key=key)
        assert args[-1] == key.queries_per_cta and args[16] == key.heads_per_cta


def test_merge_prefetch_where_its_copies_fit():
    """Split tiles copy every split's rows of their merge slice into shared memory before the
    factor pass (merge_prefetch, H200 run 29); the copies reuse the loop's dead buffers, so it
    fits every split tile at N = 5 and 7 (8 heads at N = 7: 20-row slices of 3 splits, 120 KB)
    and more than the loop's buffers counts as more.
    Unsplit launches have no merge, so the rules refuse it there, and it never travels
    without the L2 merge."""
    def prefetching(n):
        cfg = dc.select_tile_config(64, n, (9, 0))
        tiles = dc.split_tiles(cfg, 133, (9, 0), n, 64)
        return {(t.heads_per_cta, t.block_kv): t.merge_prefetch for t in tiles}

    assert prefetching(5) == prefetching(7) == {
        (16, 32): True, (32, 32): True, (4, 32): True, (4, 64): True, (8, 64): True
    }
    assert dc._tile_smem_bytes(7, dc.split_tiles(dc.select_tile_config(64, 7, (9, 0)), 133, (9, 0), 7, 64)[-1]) == (
        dc.smem_bytes(7, 8, 64, 1, 64)
    )
    sm90 = dc.select_tile_config(64, 5, (9, 0))
    assert not sm90.merge_prefetch and dc.tile_rule_violations(dataclasses.replace(sm90, merge_prefetch=True), 5)
    # 64 rows over 8 splits: 8-row slices, 128 KB of copies, more than the loop's buffers
    wide = dataclasses.replace(
        sm90, heads_per_cta=16, queries_per_cta=0, kv_splits=8, block_kv=32, merge_prefetch=True
    )
    assert dc._tile_smem_bytes(4, wide) == 4 * 8 * 8 * 512 + 4 * 256 + 4096 > dc.smem_bytes(4, 16, 32, 1, 64)


def test_scratch_holds_every_merge_slice_the_prefetch_copies(kernel_module):
    """16 heads x 1 query on mma.sync pads to 16 rows, but its merge over 5 splits takes 5
    slices of 4 (3 of 6 over 3 splits): the merge_prefetch copy reads whole slices, so a split's
    scratch rows grow to them, in the kernel's signature, the warm-up tensors and the wrapper's
    scratch alike. A wgmma tile's 64 padded rows already hold every slice."""
    mma = dc.TileConfig(16, 32, 128, 1, 1, 16, queries_per_cta=1, kv_splits=5, q_async=True, merge_prefetch=True)
    assert dc.tile_rule_violations(mma, 5) == []
    assert dc.scratch_rows(1, 16, 16, 5, True) == 20 and dc.scratch_rows(1, 16, 16, 5, False) == 16
    assert dc.scratch_rows(1, 16, 16, 3, True) == 18
    assert dc.scratch_rows(1, 16, 64, 5, True) == 64  # the wgmma 16 x 1 tile: 64 rows
    assert dc.scratch_rows(7, 4, 64, 6, True) == 64  # 28 rows, 6-row slices x 6 = 36
    assert kernel_module.scratch_shape(1, 16, 5, mma) == (25, 20)
    owner = kernel_module.DSparkDraftAttnTileLangKernel()
    key = owner.dispatch(
        num_heads=16, num_queries=5, width=192, block_size=64, page_bytes=dc.fp8_ds_mla_page_bytes(64),
        scale=0.04, capability=(9, 0), tile=mma,
    )
    inputs = owner.warmup_inputs(key)
    assert inputs["part_o"].shape == (1, 20, 512) and inputs["part_ml"].shape == (1, 2, 20)


def test_timeline_stamps_edit_the_current_kernel():
    """timeline.py inserts clock stamps at anchor lines of the kernel's source; an anchor the
    kernel lost would raise on the GPU after the device time is spent."""
    from benchmarks.dspark_draft_attn import timeline

    src = timeline.stamped_source()
    assert "def timeline_dspark_draft_attn(" in src and "@tilelang_jit" not in src
    # every point outside the KV loop once, each tile point once inside it
    for slot in (*timeline.POINTS.values(), *timeline.AFTER.values()):
        assert src.count(f"stamps[rid, bx, {slot}]") == 1, timeline.names()[slot]
    for k in range(len(timeline.TILE_POINTS)):
        assert src.count(f"stamps[rid, bx, {timeline.TILE_BASE} + tt * {len(timeline.TILE_POINTS)} + {k}]") == 1
    assert src.count('"dspark_globaltimer"') == 2
    assert src.count('"clock64"') == len(timeline.POINTS) + len(timeline.TILE_POINTS) + len(timeline.AFTER)
    compile(src, "timeline", "exec")


def test_timeline_stamps_edit_the_resident_kernel():
    """--kernel resident: the KV-resident kernel's stamps, each pass point once in the pass loop
    (its slot a function of the pass), the tile tops once in the tile loop; every slot a pass
    of 64 heads x 1 query at N = 7 can write stays inside the CTA's row of stamps."""
    from benchmarks.dspark_draft_attn import timeline

    src = timeline.resident_stamped_source()
    assert "def timeline_dspark_draft_attn_resident(" in src and "@tilelang_jit" not in src
    # --gather: the stamped kernel's gather default, and nothing else, changes
    for gather in timeline.GATHERS:
        other = timeline.resident_stamped_source(gather)
        assert other.count(f'gather: str = "{gather}"') == 1
        assert other.replace(f'gather: str = "{gather}"', f'gather: str = "{timeline.GATHERS[0]}"') == src
    for slot in timeline.RES_POINTS.values():
        assert src.count(f"stamps[rid, bx, {slot}]") == 1, timeline.resident_names()[slot]
    per_pass = len(timeline.PASS_POINTS)
    at = {name: f"stamps[rid, bx, {timeline.PASS_BASE} + p * {per_pass} + {k}]"
          for k, name in enumerate(timeline.PASS_POINTS)}
    # t0_top and t1_top: one stamp in the tile loop, its slot t0_top's + t
    at["t0_top"] = at.pop("t1_top").replace(f"+ {timeline.PASS_POINTS.index('t1_top')}]",
                                           f"+ {timeline.PASS_POINTS.index('t0_top')} + t]")
    for name, text in at.items():
        assert src.count(text) == 1, name
    assert src.count('"clock64"') == len(timeline.RES_POINTS) + per_pass - 1
    assert src.count('"dspark_globaltimer"') == 2
    # one import_source whichever gather traces (TileLang refuses a second): the bulk gather's
    # carries the clock helper, the other gathers import it alone
    assert src.count("T.import_source(_BULK_SOURCE + ") == 1
    assert src.count('if gather != "bulk":\n            T.import_source(') == 1
    # "stored" after the pass's output stores, inside the pass loop (indented as its body)
    assert src.index("] = q_s[m, d]") < src.index(at["stored"])
    assert f"                if T.get_thread_binding() == 0:\n                    {at['stored']}" in src
    tile = timeline.resident_cases()[0][2]
    passes = -(-7 // dc.cta_queries(7, tile))
    assert passes <= timeline.MAX_PASSES and tile.resident_tiles == 2
    assert max(timeline.resident_names()) < timeline.RES_SLOTS
    compile(src, "timeline", "exec")


def test_wrapper_shapes_and_page_views(kernel_module):
    pool = torch.zeros(3, dc.fp8_ds_mla_page_bytes(64), dtype=torch.uint8)
    as_3d = torch.as_strided(pool, (3, 64, 584), (37_440, 584, 1))  # the SWA cache's own view
    f8, i64, bf = kernel_module.page_views(as_3d, 37_440)
    assert f8.shape == (3, 37_440) and bf.shape == (3, 18_720) and i64.shape == (3, 4_680)
    assert f8.data_ptr() == i64.data_ptr() == bf.data_ptr() == pool.data_ptr()
    # the kernel reads token t's scale byte c as (word >> 8 * c) & 255 of int64 word
    # block_size * 576 / 8 + t: that is this layout's byte on a little-endian GPU
    t, scale_bytes = 5, torch.tensor([127, 120, 130, 0, 255, 1, 126, 0], dtype=torch.uint8)
    pool[1, 64 * 576 + 8 * t : 64 * 576 + 8 * t + 8] = scale_bytes
    word = int(i64[1, 64 * 576 // 8 + t])
    assert [(word >> (8 * c)) & 255 for c in range(8)] == scale_bytes.tolist()
    with pytest.raises(ValueError, match="page stride"):
        kernel_module.page_views(as_3d, 37_376)
    q = torch.zeros(7, 8, 512, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="whole requests"):
        kernel_module.dspark_draft_attention(
            q,
            pool,
            torch.zeros(7, 1, 192, dtype=torch.int32),
            torch.zeros(7, dtype=torch.int32),
            torch.zeros(8),
            torch.empty_like(q),
            num_queries=5,
            scale=1.0,
            block_size=64,
            page_bytes=37_440,
            capability=(9, 0),
        )


def test_sweep_shapes_follow_the_tile_rules():
    """Every shape the GPU sweep times is one the kernel can build: the FullCol warp rule,
    the accumulator bound, and a batched all-reduce size that divides a thread's rows
    (TileLang refuses a batch that does not)."""
    from benchmarks.dspark_draft_attn import draft_attn_gpu as g

    assert dc.TileConfig(8, 64, 256).reduce_batch == 1  # the measured default stays per-row
    assert any(c.reduce_batch > 1 for c in g.SWEEP_CONFIGS)
    for n in (5, 7):
        defaults = {dc.select_tile_config(h, n, cap) for h in (64, 16) for cap in ((9, 0), (12, 0))}
        assert defaults <= set(g.SWEEP_CONFIGS), "the sweep times the defaults it is compared with"
    for cfg in g.SWEEP_CONFIGS:  # the sweep runs at N = 5
        assert dc.tile_rule_violations(cfg, 5) == [], cfg


def test_wide_head_groups_fill_the_wgmma_tile():
    """SM90's unsplit tile takes the widest head group with as many queries as fill the 64-row
    wgmma tile where that needs fewer CTAs a request than 8 heads x N queries (40 of 64 rows
    live at N = 5): 64 heads x 1 query (5 CTAs, not 8), 32 x 2 (3, not 4; the last CTA holds
    one query). Where it saves none (16 x 4 against 8 x 5: no faster, H100 runs 32-33) the
    8-head tile stays. SM12x (mma.sync, 16-row tiles) is untouched."""
    want = {
        (64, 5): (64, 1, 5), (32, 5): (32, 2, 3), (16, 5): (8, 5, 2), (8, 5): (8, 5, 1),
        (64, 7): (64, 1, 7), (32, 7): (8, 7, 4), (16, 7): (8, 7, 2), (8, 7): (8, 7, 1),
    }
    for (h, n), (heads, queries, ctas) in want.items():
        cfg = dc.select_tile_config(h, n, (9, 0))
        assert (cfg.heads_per_cta, dc.cta_queries(n, cfg), dc.launch_ctas(cfg, 1, h, n)) == (heads, queries, ctas)
        assert dc.launch_ctas(cfg, 3, h, n) == 3 * ctas
        assert dc.tile_rule_violations(cfg, n) == []
        rows = dc.padded_rows(dc.cta_queries(n, cfg), cfg.heads_per_cta, cfg.row_tile)
        assert rows == 64 and rows * dc.HEAD_DIM // cfg.threads <= 128
        # split launches: 16, then 32 heads x 1 query where they divide the heads, then the 4 /
        # 8-head tiles with all of the request's queries (the wide tile over a cluster of 3
        # measured 39 us at R = 8 against 23 unsplit, H100 run 33)
        tiles = dc.split_tiles(cfg, 133, (9, 0), n, h)
        one_query = [(16, 1, 32), (32, 1, 32)][: {64: 2, 32: 2, 16: 1, 8: 0}[h]]
        assert [(t.heads_per_cta, t.queries_per_cta, t.block_kv) for t in tiles] == [
            *one_query, (4, 0, 32), (4, 0, 64), (8, 0, 64)
        ]
    assert all(dc.select_tile_config(h, 5, (9, 0)).queries_per_cta == 0 for h in (16, 8))
    for h in (64, 32, 16, 8):
        sm12x = dc.select_tile_config(h, 5, (12, 0))
        assert (sm12x.heads_per_cta, sm12x.queries_per_cta) == (4, 0)
    assert dc.query_groups(5, 0) == (5, 1) and dc.query_groups(5, 2) == (2, 3)
    assert dc.query_groups(5, 9) == (5, 1)


def test_launch_tile_takes_the_finest_split_that_fits():
    """Small batches give every KV tile of a head group a CTA of its own, with the finest
    split tile (SPLIT_TILES: 16 heads x 1 query and 32-token tiles, then 4 heads x N, then
    64-token tiles with 4 and 8 heads) whose CTAs all get an SM (132 on the H100 / H200) and
    whose clusters all run at once (co_resident_clusters); past that no split, the unsplit
    launch keeping the default tile. The KV tiles a group splits into are those of a row's live
    slots (DSpark: window + N = 133, 5 of 32 tokens; the width, 192, gives 6 and the pre-run-46
    picks). Never on SM12x (untested there)."""
    cfg = dc.select_tile_config(64, 5, (9, 0))  # 64 heads x 1 query a CTA, 64-token tiles
    shape = lambda t: (t.heads_per_cta, dc.cta_queries(5, t), t.block_kv, t.kv_splits)  # noqa: E731
    live = dc.dspark_live_slots(128, 5)
    assert live == 133 and dc.dspark_index_width(128, 5) == 192
    got = {r: shape(dc.launch_tile(cfg, r, 64, live, 132, (9, 0), 5)) for r in (1, 2, 3, 5, 6, 64)}
    assert got == {
        1: (16, 1, 32, 5),  # 100 CTAs, 20 clusters of 5 (H100 run 46: 9.7 us against 10.7-11.3)
        2: (32, 1, 32, 5),  # 16 x 1: 40 clusters of 5; 32 x 1: 20 (H100 run 49: 12.35 us)
        3: (8, 5, 64, 3),  # 4 heads: 48 clusters of 3, more than the 39 that run at once
        5: (64, 1, 64, 1),  # 8 heads: 40 clusters of 3: unsplit, 5 CTAs a request
        6: (64, 1, 64, 1),
        64: (64, 1, 64, 1),
    }
    # with the width as the live slots, 16 x 1 over 6 CTAs is 20 clusters of 6, more than run at
    # once (H100 runs 44 / 46: 17.2-17.4 us): 32 x 1 over 6 (10 clusters; not timed)
    assert shape(dc.launch_tile(cfg, 1, 64, 192, 132, (9, 0), 5)) == (32, 1, 32, 6)
    res = dc.resident_tile(cfg, 64, 5)
    assert dc.tile_rule_violations(res, 5) == [] and dc.tile_rule_violations(res, 7) == []
    cfg = dc.select_tile_config(16, 5, (9, 0))  # 8 heads x 5 queries: 2 CTAs a request
    at16 = {r: shape(dc.launch_tile(cfg, r, 16, live, 132, (9, 0), 5)) for r in (1, 4, 5, 6, 9, 10, 19, 20)}
    # H100 run 47 timed R = 1, 2, 4, 5, 6, 11 and 21 (--split-rule-sizes): the picks were the
    # fastest tile, where the launch's clusters beyond those that run at once took 1.2-1.6x
    assert at16 == {
        1: (16, 1, 32, 5), 4: (16, 1, 32, 5),  # 100 CTAs, 20 clusters of 5 (22 run at once)
        5: (4, 5, 32, 5),  # 16 x 1: 25 clusters (17.4 us against 11.4)
        6: (4, 5, 64, 3), 9: (4, 5, 64, 3),  # 4 x 5, 32-token: 24 clusters (19.4 against 12.4)
        10: (8, 5, 64, 3), 19: (8, 5, 64, 3),  # 4 x 5, 64-token: 40 of 3 > 39 (R = 11: 23.4 / 14.4)
        20: (8, 5, 64, 1),  # 40 clusters of 3: unsplit (R = 21: 27.4 against 22.6)
    }
    # N = 7 at 64 heads: 16 x 1 would be 140 CTAs; 32 x 1 is 70, 14 clusters
    n7 = dc.launch_tile(dc.select_tile_config(64, 7, (9, 0)), 1, 64, 135, 132, (9, 0), 7)
    assert (n7.heads_per_cta, n7.queries_per_cta, n7.block_kv, n7.kv_splits) == (32, 1, 32, 5)
    # 32 heads: 16 x 1 to R = 2 (20 clusters), then 32 x 1 to R = 4
    at32 = dc.select_tile_config(32, 5, (9, 0))
    assert [shape(dc.launch_tile(at32, r, 32, live, 132, (9, 0), 5))[:2] for r in (2, 3, 4, 5)] == [
        (16, 1), (32, 1), (32, 1), (8, 5)
    ]
    # 8 heads: no 16-head tile
    assert dc.launch_tile(dc.select_tile_config(8, 5, (9, 0)), 1, 8, live, 132, (9, 0), 5).heads_per_cta == 4
    # a 2-tile index row (a shorter window): 4 32-token splits
    assert shape(dc.launch_tile(cfg, 1, 64, 128, 132, (9, 0), 5))[2:] == (32, 4)
    for n in (5, 7):
        for t in dc.split_tiles(dc.select_tile_config(64, n, (9, 0)), dc.dspark_live_slots(128, n), (9, 0), n, 64):
            assert dc.tile_rule_violations(t, n) == []
    assert dc.launch_tile(dc.select_tile_config(64, 5, (12, 0)), 1, 64, live, 188, (12, 0), 5).kv_splits == 1
    assert dc.tile_rule_violations(dataclasses.replace(cfg, kv_splits=9), 5)  # not a cluster


def test_co_resident_clusters_fit_the_h100_measurements():
    """Clusters that run at once: the driver's figures for 132 SMs (H100 run 47), which fit the
    timings: 16 clusters of 6 one wave (the R = 1 x 64 tile of runs 24-45), 20 of 6 two (runs
    44 / 46: 17.2-17.4 us), 20 of 5 one (9.5), 24 and 25 of 5 two (19.4, 17.4), 32 of 3 one,
    42 and 44 of 3 two. Other SM counts get a lower bound, never above the measured ones."""
    measured = {2: 66, 3: 39, 4: 30, 5: 22, 6: 17, 7: 15, 8: 15}
    assert {k: dc.co_resident_clusters(132, k) for k in measured} == measured
    assert 16 <= dc.co_resident_clusters(132, 6) < 20 <= dc.co_resident_clusters(132, 5) < 24
    assert 32 <= dc.co_resident_clusters(132, 3) < 42
    assert dc.co_resident_clusters(132, 1) == 132
    for size, clusters in measured.items():  # the bound for other parts stays below the measurement
        assert dc.co_resident_clusters(131, size) <= clusters
    assert dc.co_resident_clusters(188, 8) == 10 and dc.co_resident_clusters(114, 5) == 12


def test_wrapper_splits_small_batches_into_one_scratch(kernel_module, monkeypatch):
    """The public wrapper picks kv_splits per batch and hands the kernel views of one per-device
    scratch (so the launch is graph-capturable), never growing it inside a capture. The launch
    itself is recorded, not run (no CUDA here)."""
    owner = kernel_module._DSPARK_DRAFT_ATTN_TILELANG_KERNEL
    launches = []

    class Recorder:
        dispatch = owner.dispatch

        def __call__(self, **kw):
            launches.append(kw)

    monkeypatch.setattr(kernel_module, "_DSPARK_DRAFT_ATTN_TILELANG_KERNEL", Recorder())
    monkeypatch.setattr(kernel_module, "_sm_count", lambda device: 132)
    monkeypatch.setattr(kernel_module, "_SPLIT_SCRATCH", {})
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)  # CPU torch
    page = dc.fp8_ds_mla_page_bytes(64)
    pool = torch.zeros(2, page, dtype=torch.uint8)

    def launch(r, capability=(9, 0), heads=64, live_slots=None):
        q = torch.zeros(r * 5, heads, 512, dtype=torch.bfloat16)
        kernel_module.dspark_draft_attention(
            q, pool, torch.zeros(r * 5, 192, dtype=torch.int32), torch.zeros(r * 5, dtype=torch.int32),
            torch.zeros(heads), torch.empty_like(q), num_queries=5, scale=1.0, block_size=64,
            page_bytes=page, capability=capability, live_slots=live_slots,
        )  # fmt: skip
        return launches[-1]

    # the draft layer's rows: 128 + 5 live slots, 5 tiles of 32 tokens; 4 groups of 16 heads x
    # 5 query groups x 5 splits
    one = launch(1, live_slots=133)
    key = one["compile_key"]
    assert (key.kv_splits, key.heads_per_cta, key.queries_per_cta, key.block_kv) == (5, 16, 1, 32)
    assert one["part_o"].shape == (100, 64, 512) and one["part_ml"].shape == (100, 2, 64)
    # without live_slots, the width (192): 6 tiles, 16 x 1 over 6 would be 20 clusters of 6 (17
    # run at once), so 2 groups of 32 heads x 5 query groups x 6 splits
    wide = launch(1)
    assert (wide["compile_key"].kv_splits, wide["compile_key"].heads_per_cta) == (6, 32)
    assert wide["part_o"].shape == (60, 64, 512)
    four = launch(4, live_slots=133)  # 192 CTAs of 4 heads would not fit: 8 heads a CTA
    assert four["compile_key"].kv_splits == 3 and four["compile_key"].heads_per_cta == 8
    assert four["part_o"].shape == (96, 64, 512)
    assert four["part_o"].data_ptr() == one["part_o"].data_ptr()  # one scratch, reused
    unsplit = launch(5, live_slots=133)
    assert unsplit["compile_key"].kv_splits == 1  # 40 clusters of 3: more than run at once
    for bad in (0, -5, 193):  # a row holds at most its width
        with pytest.raises(ValueError, match=rf"live_slots must be in 1\.\.192 \(the index width\), got {bad}"):
            launch(1, live_slots=bad)
    big = launch(48)["compile_key"]  # 48 resident CTAs (1 wave) cost more than 240 streaming (2)
    assert big.kv_splits == 1 and not big.resident and big.heads_per_cta == 64
    huge = launch(256)["compile_key"]  # 2 resident waves against 10 streaming ones
    assert huge.kv_splits == 1 and huge.resident and huge.heads_per_cta == 64
    # an arch that never splits never allocates the scratch
    monkeypatch.setattr(kernel_module, "_SPLIT_SCRATCH", {})
    sm12x = launch(1, capability=(12, 0))
    assert sm12x["compile_key"].kv_splits == 1 and kernel_module._SPLIT_SCRATCH == {}
    # inside a capture with no scratch yet: no allocation that would live in the graph's
    # pool, the launch stays unsplit
    monkeypatch.setattr(kernel_module, "_SPLIT_SCRATCH", {})
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    captured = launch(1)
    assert captured["compile_key"].kv_splits == 1 and kernel_module._SPLIT_SCRATCH == {}


def test_wrapper_keeps_page_and_scratch_views_while_they_are_valid(kernel_module, monkeypatch):
    """An eager launch's host time: the cache's page views and the scratch's views are made once,
    then reused while the same cache tensor has the same memory and layout, and the scratch has
    not grown; a dead cache tensor's views are dropped with it (no KV memory kept alive)."""
    import gc

    page = dc.fp8_ds_mla_page_bytes(64)
    monkeypatch.setattr(kernel_module, "_PAGE_VIEWS", {})
    pool = torch.zeros(3, page, dtype=torch.uint8)
    first = kernel_module._cached_page_views(pool, page)
    assert all(a is b for a, b in zip(kernel_module._cached_page_views(pool, page), first, strict=True))
    assert first[0].data_ptr() == pool.data_ptr() and first[0].shape == (3, page)
    with pytest.raises(ValueError, match="page stride"):  # still validated on a miss
        kernel_module._cached_page_views(pool, page - 64)
    other = torch.zeros(3, page, dtype=torch.uint8)
    pool.set_(other.untyped_storage(), 0, (3, page), (page, 1))  # re-pointed, same shape
    moved = kernel_module._cached_page_views(pool, page)
    assert moved[0].data_ptr() == other.data_ptr() != first[0].data_ptr()
    pool.set_(other.untyped_storage(), 0, (2, page), (page, 1))  # fewer pages, same memory
    assert kernel_module._cached_page_views(pool, page)[0].shape == (2, page)
    del pool, first, moved
    gc.collect()
    assert kernel_module._PAGE_VIEWS == {}

    monkeypatch.setattr(kernel_module, "_sm_count", lambda device: 4)
    monkeypatch.setattr(kernel_module, "_SPLIT_SCRATCH", {})
    monkeypatch.setattr(kernel_module, "_SCRATCH_VIEWS", {})
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)  # CPU torch
    cpu = torch.device("cpu")
    small = kernel_module._split_scratch(cpu, 3, 64)
    assert all(a is b for a, b in zip(kernel_module._split_scratch(cpu, 3, 64), small, strict=True))
    old = kernel_module._SPLIT_SCRATCH[cpu][0]
    grown = kernel_module._split_scratch(cpu, 6, 64)  # more than the 4 x 64 rows allocated
    new = kernel_module._SPLIT_SCRATCH[cpu][0]
    assert new is not old and grown[0].data_ptr() == new.data_ptr()
    # no view of the old scratch kept (it would stay allocated), none handed out again
    assert all(entry[0] is new for entry in kernel_module._SCRATCH_VIEWS.values())
    again = kernel_module._split_scratch(cpu, 3, 64)
    assert again[0].data_ptr() == new.data_ptr() and again[0] is not small[0]


def test_wrapper_chooses_a_batch_shape_s_tile_and_key_once(kernel_module, monkeypatch):
    """select_tile_config + launch_tile + the compile key are ~100 us of Python a call (more than
    the kernel at small R in an eager launch): the wrapper chooses them once per batch shape.
    The launch itself is recorded, not run (no CUDA here)."""
    owner = kernel_module._DSPARK_DRAFT_ATTN_TILELANG_KERNEL
    launches, chosen = [], []
    real_launch_tile = kernel_module.launch_tile

    class Recorder:
        dispatch = owner.dispatch

        def __call__(self, **kw):
            launches.append(kw)

    def counting_launch_tile(*args):
        chosen.append(args[1])  # num_reqs
        return real_launch_tile(*args)

    monkeypatch.setattr(kernel_module, "_DSPARK_DRAFT_ATTN_TILELANG_KERNEL", Recorder())
    monkeypatch.setattr(kernel_module, "launch_tile", counting_launch_tile)
    monkeypatch.setattr(kernel_module, "_sm_count", lambda device: 132)
    monkeypatch.setattr(kernel_module, "_SPLIT_SCRATCH", {})
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)  # CPU torch
    page = dc.fp8_ds_mla_page_bytes(64)
    pool = torch.zeros(2, page, dtype=torch.uint8)

    def launch(r, scale=1.0):
        q = torch.zeros(r * 5, 64, 512, dtype=torch.bfloat16)
        kernel_module.dspark_draft_attention(
            q, pool, torch.zeros(r * 5, 192, dtype=torch.int32), torch.zeros(r * 5, dtype=torch.int32),
            torch.zeros(64), torch.empty_like(q), num_queries=5, scale=scale, block_size=64,
            page_bytes=page, capability=(9, 0),
        )  # fmt: skip
        return launches[-1]["compile_key"]

    first, again = launch(1), launch(1)
    assert chosen == [1] and again == first and first.kv_splits == 6
    assert launch(256).resident and chosen == [1, 256]
    assert launch(256).resident and chosen == [1, 256]
    assert launch(1, scale=0.5).scale == 0.5 and chosen == [1, 256, 1]  # the scale is in the key


class _TileLangJitLike:
    """Stand-in for TileLang's JIT function (not importable in CPU CI): the surface the owner's
    launch reads, as tilelang 0.1.12 has it: calling it parses the arguments into a key
    (func.parse_args: tensors by shape and dtype, scalars by value), compiles on a miss into
    _kernel_cache and runs; the compiled kernel takes the tensors alone. The GPU test runs the
    real one."""

    __hash__ = None  # as TileLang's JITImpl (a dataclass)

    def __init__(self):
        self.parses, self.compiles, self.runs = 0, 0, []
        self._kernel_cache = {}
        self.func = types.SimpleNamespace(parse_args=self._parse_args)

    def _parse_args(self, *args):
        self.parses += 1
        tensors = {f"t{i}": a for i, a in enumerate(args) if isinstance(a, torch.Tensor)}
        key = tuple((a.dtype, tuple(a.shape)) if isinstance(a, torch.Tensor) else a for a in args)
        return key, tensors

    def compile(self, *args):
        self.compiles += 1
        return lambda *tensors: self.runs.append(tensors)

    def __call__(self, *args):
        key, tensors = self.func.parse_args(*args)
        if key not in self._kernel_cache:
            self._kernel_cache[key] = self.compile(*args)
        return self._kernel_cache[key](*tensors.values())


def test_eager_launches_reuse_the_compiled_kernel(kernel_module):
    """The owner's launch keeps the kernel TileLang's JIT compiled for a call signature (every
    tensor's shape, strides, dtype and device, every scalar) and calls it directly the next
    time, skipping the JIT's argument parsing; any difference in the signature goes back
    through the JIT."""
    owner = kernel_module.DSparkDraftAttnTileLangKernel()
    jit = _TileLangJitLike()
    q, lens = torch.zeros(2, 5, 64, 512, dtype=torch.bfloat16), torch.zeros(2, 5, dtype=torch.int32)
    owner.launch(jit, (q, lens, 64, 0.25))  # through the JIT, then the kernel looked up once
    assert (jit.compiles, jit.parses, len(jit.runs)) == (1, 2, 1)
    q2, lens2 = q.clone(), lens.clone()
    owner.launch(jit, (q2, lens2, 64, 0.25))
    assert (jit.compiles, jit.parses, len(jit.runs)) == (1, 2, 2)  # no parse
    assert jit.runs[-1][0] is q2 and jit.runs[-1][1] is lens2  # the new tensors, in order
    owner.launch(jit, (q2, lens2, 64, 0.5))  # another scalar
    owner.launch(jit, (torch.zeros(3, 5, 64, 512, dtype=torch.bfloat16), lens, 64, 0.25))  # shape
    wide = torch.zeros(2, 5, 64, 1024, dtype=torch.bfloat16)[..., :512]
    owner.launch(jit, (wide, lens, 64, 0.25))  # strides only: the JIT's key, a miss here
    assert (jit.compiles, jit.parses) == (3, 8) and len(jit.runs) == 5
    owner.launch(jit, (q, lens, 64, 0.25))
    assert jit.parses == 8 and len(jit.runs) == 6
    owner.reuse_compiled = False  # TileLang's own path, every call
    owner.launch(jit, (q, lens, 64, 0.25))
    assert jit.parses == 9 and len(jit.runs) == 7
    # a JIT without those internals (another TileLang): its own call every time, nothing kept
    plain = kernel_module.DSparkDraftAttnTileLangKernel()
    calls = []
    for _ in range(2):
        plain.launch(lambda *args: calls.append(args), (q, lens, 64, 0.25))
    assert len(calls) == 2 and plain._compiled == {}


def test_tile_options_are_keyword_only():
    """A positional TileConfig past row_tile broke when fields were removed (2026-12-07: a GPU
    test's False for warp_specialized became queries_per_cta); the options take names only."""
    assert dc.TileConfig(8, 64, 256, 1, 1, 64, queries_per_cta=1).queries_per_cta == 1
    with pytest.raises(TypeError):
        dc.TileConfig(8, 64, 256, 1, 1, 64, 1)


def test_tile_rules_catch_unbuildable_shapes():
    assert dc.tile_rule_violations(dc.TileConfig(8, 64, 192, row_tile=64), 5)  # not whole warpgroups
    assert dc.tile_rule_violations(dc.TileConfig(8, 32, 256, row_tile=16), 5)  # 4 columns a warp
    assert dc.tile_rule_violations(dc.TileConfig(16, 64, 256, row_tile=64), 5)  # 256 floats a thread
    assert dc.tile_rule_violations(dc.TileConfig(8, 64, 256, 1, 4, 64), 5)  # 2 rows, batch 4
    assert dc.tile_rule_violations(dc.TileConfig(8, 80, 256, row_tile=64), 5)  # splits a warp
    assert dc.tile_rule_violations(dc.TileConfig(8, 64, 256, 1, 6), 5) == []  # 6 rows, batch 6


def test_every_ablation_variant_edits_the_current_kernel():
    """ablate.py cuts parts out of the kernel by text edits; one that no longer matches the
    kernel's source would time the whole kernel under a wrong name (or fail on the GPU)."""
    from benchmarks.dspark_draft_attn import ablate

    whole = ablate.variant_source("whole")
    for name, edits in ablate.VARIANTS.items():
        src = ablate.variant_source(name)
        assert f"def ablate_{name}(" in src and "@tilelang_jit" not in src
        assert (src != whole.replace("ablate_whole", f"ablate_{name}")) == bool(edits), name
        compile(src, name, "exec")  # still Python
        ast.parse(src)


def test_every_resident_ablation_edits_the_current_kernel():
    """--kernel resident: each variant's edits match the KV-resident kernel (or its tile macro)
    exactly once, and the source it runs is the edited macro, then the renamed kernel; the
    correct variant (registers_out) no longer stages the output through Q's buffer."""
    from benchmarks.dspark_draft_attn import ablate

    whole = ablate.resident_variant_source("whole")
    for name, (kernel_edits, macro_edits) in ablate.RESIDENT_VARIANTS.items():
        src = ablate.resident_variant_source(name)
        assert src.startswith("@T.macro\ndef _attend_tile(") and f"def ablate_resident_{name}(" in src
        assert (src != whole.replace("ablate_resident_whole", f"ablate_resident_{name}")) == bool(
            kernel_edits or macro_edits), name
        compile(src, name, "exec")
    assert "] = q_s[m, d]" in whole and "] = q_s[m, d]" not in ablate.resident_variant_source("registers_out")
    assert "T.gemm(" not in ablate.resident_variant_source("no_gemms")
    assert whole.count("_issue_q(") == ablate.resident_variant_source("no_pass_q").count("_issue_q(") + 1


def test_bulk_gather_variant_replaces_the_streaming_tile_gather(capsys):
    """ablate's bulk_gather (the resident kernel's bulk gather in the streaming kernel's tile
    loop): the per-element gathers and dequantisation are gone, one bulk copy a slot and one
    16-byte dequantisation a chunk take their place, the device source is imported once; an
    unknown --variants name is refused before anything runs, naming it."""
    from benchmarks.dspark_draft_attn import ablate

    whole, bulk = ablate.variant_source("whole"), ablate.variant_source("bulk_gather")
    for gone in ("fp8_s[j, d] = kv_fp8[", "rope_s[j, d] = kv_bf16[", "scale_f[j, c] = T.exp2("):
        assert gone in whole and gone not in bulk, gone
    assert bulk.count('"dspark_bulk_record"') == bulk.count('"dspark_dequant16"') == 1
    assert bulk.count("T.import_source(_BULK_SOURCE)") == 1 and bulk.startswith(ablate._BULK_IMPORT)
    # the tile's GEMMs and softmax are the whole kernel's
    assert bulk[bulk.index("for m, j in T.Parallel(m_pad, block_kv):"):] == whole[
        whole.index("for m, j in T.Parallel(m_pad, block_kv):"):].replace("ablate_whole", "ablate_bulk_gather")
    compile(bulk, "bulk_gather", "exec")
    with pytest.raises(SystemExit) as exc:
        ablate.main(["--json", os.devnull, "--variants", "whole,no_such"])
    assert exc.value.code == 2 and "no_such not among the plain kernel's" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        ablate.main(["--json", os.devnull, "--kernel", "resident", "--variants", "no_gemm1"])


def test_codegen_overrides_name_their_field():
    """benchmarks/dspark_draft_attn/codegen.py (CPU codegen of one tile, run where tilelang is
    installed) turns --set FIELD=VALUE into TileConfig overrides and refuses what is not one."""
    from benchmarks.dspark_draft_attn import codegen

    fields = dc.TileConfig.__dataclass_fields__
    got = codegen.parse_overrides(["kv_splits=3", "merge_prefetch=true", "queries_per_cta=0"], fields)
    assert got == {"kv_splits": 3, "merge_prefetch": True, "queries_per_cta": 0}
    tile = dataclasses.replace(dc.select_tile_config(64, 5, (9, 0)), **got)
    assert (tile.kv_splits, tile.merge_prefetch, dc.cta_queries(5, tile)) == (3, True, 5)
    for bad, says in (("nope=1", "FIELD one of"), ("kv_splits", "FIELD=VALUE"), ("q_async=2", "bool"),
                      ("block_kv=x", "int")):
        with pytest.raises(ValueError, match=says):
            codegen.parse_overrides([bad], fields)
    assert codegen.capability_of("90a") == (9, 0) and codegen.capability_of("120") == (12, 0)
    with pytest.raises(ValueError, match="--arch"):
        codegen.capability_of("sm90")


# (R, heads): the faster tile at N = 5 on an H100 (graph, cold L2; runs 63-64 and 66 timed
# both tiles at each size, run 62 the resident one at R = 256, run 37 the same streaming kernel
# there); True where the KV-resident tile was faster. The rule was fitted on all but run 66's
RESIDENT_FASTER_H100 = {
    (45, 32): False, (48, 64): False, (56, 32): False, (56, 64): False, (64, 32): False,
    (64, 64): True, (67, 16): True, (72, 64): True, (76, 32): False, (80, 64): True,
    (88, 32): True, (96, 32): True, (100, 16): True, (110, 32): True, (112, 64): True,
    (124, 64): True, (133, 16): False, (133, 32): False, (133, 64): True, (144, 64): True,
    (150, 32): False, (159, 64): True, (176, 32): True, (199, 16): True, (256, 16): True,
    (256, 64): True,
    # run 66, after the fit: 8 of its 10 sizes
    (62, 64): True, (150, 64): True, (140, 32): False, (200, 32): True, (280, 16): True,
    (310, 16): True, (330, 16): True, (420, 16): True,
}  # fmt: skip
# not held: run 66's two misses, 160 x 32 and 170 x 16, where the rule keeps the streaming
# tile and the resident one was 2.0 / 2.8 % faster


def test_launch_tile_takes_the_kv_resident_tile_where_it_was_faster():
    """Past the split tiles, large SM90 batches take the KV-resident tile where the wave model
    (launch_waves: a short last wave at LAST_WAVE_FIXED plus its share; a resident CTA at
    RESIDENT_GATHER_COST + RESIDENT_PASS_COST x passes streaming CTAs) says it costs less: at
    every size where an H100 timed both tiles, the faster one, but for two sizes within 3 % (the
    previous integer-wave rule missed 6 of the 26 it was refitted on, by up to 8 %)."""

    def resident(r, h, n=5, sms=132, cap=(9, 0)):
        return dc.launch_tile(dc.select_tile_config(h, n, cap), r, h, 192, sms, cap, n).resident

    for (r, h), faster in RESIDENT_FASTER_H100.items():
        assert resident(r, h) == faster, (r, h)
    # below a full resident wave at 16 heads the streaming tile won (R = 64: 28.5 us against
    # the resident tile's 34.7 at 67, one wave either way); small batches never go resident
    assert not resident(64, 16)
    assert not any(resident(r, h) for r in (1, 8, 32) for h in (16, 32, 64))
    assert resident(1024, 64) and resident(1024, 32) and resident(1024, 64, n=7)
    # a short last wave costs its fixed part plus its share of the SMs
    assert dc.launch_waves(264, 132) == 2.0
    assert dc.launch_waves(133, 132) == pytest.approx(1 + dc.LAST_WAVE_FIXED + (1 - dc.LAST_WAVE_FIXED) / 132)
    assert dc.launch_waves(1, 132) < dc.launch_waves(131, 132) < dc.launch_waves(132, 132)
    # 8 heads: 8 x 8 rows is one pass a CTA, the same CTAs as streaming: never
    assert not any(resident(r, 8) for r in (64, 256, 1024))
    # the rule follows the SM count, and never leaves SM90
    assert resident(64, 64, sms=32) and not resident(48, 64, sms=132)
    assert not resident(1024, 64, sms=188, cap=(12, 0))
    cfg = dc.select_tile_config(64, 5, (9, 0))
    res = dc.resident_tile(cfg, 64, 5)
    assert dc.resident_passes(res, 5) == 5 and dc.resident_passes(res, 7) == 7
    assert dc.resident_passes(dataclasses.replace(res, passes=3), 5) == 3


def test_resident_rule_sizes_are_checked_before_any_gpu_work(capsys):
    """The GPU benchmark's --rule-sizes (launch_tile's KV-resident rule timed against both
    tiles) refuses sizes it cannot run, naming the flag and the value, before it looks for a
    GPU; good ones get as far as the GPU check."""
    from benchmarks.dspark_draft_attn import draft_attn_gpu as g

    for bad in ("1x7", "0x64", "64"):
        with pytest.raises(SystemExit) as e:
            g.main(["bench", "--rule-sizes", bad])
        assert e.value.code == 2
        assert f"--rule-sizes {bad!r}: comma-separated RxH" in capsys.readouterr().err
    if not torch.cuda.is_available():
        assert g.main(["bench", "--rule-sizes", "80x64,132x16"]) == 2
        assert "no CUDA device" in capsys.readouterr().err


def test_fit_resident_rule_scores_the_library_rule_as_launch_tile_picks():
    """fit_resident_rule (the refit tool, no GPU) models the library's rule exactly: on run 66,
    timed after the refit, its model of the library's numbers makes the pick launch_tile
    recorded at every size; on the runs the rule was fitted on (63-64) it finds no miss, and
    the refit's numbers are its grid's best; with run 66 it names run 66's two misses."""
    from benchmarks.dspark_draft_attn import fit_resident_rule as fit

    results = Path(__file__).resolve().parents[3] / "benchmarks" / "dspark_draft_attn"
    run = {n: results / f"h100-2026-12-07-run{n}-rules-stage.json" for n in (63, 64, 66)}
    recorded = json.loads(run[66].read_text())["draft_attn"]["resident_rule"]["rows"]
    timed = fit.load([run[66]])
    assert len(timed) == len(recorded) == 10
    for t, row in zip(timed, recorded, strict=True):
        assert (fit.LIBRARY.cost_ratio(t) < 1) == row["rule_picks_resident"], (t.reqs, t.heads)
    fitted_on = fit.load([run[63], run[64]])
    assert fit.score(fit.LIBRARY, fitted_on)[0] == []
    assert fit.grid_search(fitted_on, top=1)[0][2] == fit.LIBRARY
    misses, _ = fit.score(fit.LIBRARY, fitted_on + timed)
    assert {(t.reqs, t.heads) for t in misses} == {(160, 32), (170, 16)}


def test_rules_precompiles_the_tiles_the_resident_rule_times(monkeypatch):
    """`rules` with --rule-sizes (the KV-resident rule alone, for a short device budget)
    compiles both tiles resident_rule times up front, once a head count, in parallel with the
    rest; not one by one as the timing reaches them (~40 s each)."""
    from benchmarks.dspark_draft_attn import draft_attn_gpu as g

    # an H100's answers, without CUDA (the kernel module is not loaded here: dk is None)
    monkeypatch.setattr(g.torch.cuda, "get_device_capability", lambda *_: (9, 0))
    monkeypatch.setattr(g, "dk", types.SimpleNamespace(_sm_count=lambda *_: 132))
    monkeypatch.setattr(g, "compile_key", lambda h, n, cfg: (h, n, cfg))  # the kernel's needs dk
    sizes = ((80, 64), (144, 64), (199, 16))
    keys = g.precompile_keys("rules", False, resident_rule_sizes=sizes)
    want = []
    for h in (64, 16):
        cfg = g.dc.select_tile_config(h, 5, (9, 0))
        assert g.dc.resident_kv(cfg, (9, 0))
        want += [g.compile_key(h, 5, dataclasses.replace(cfg, kv_splits=1)),
                 g.compile_key(h, 5, g.dc.resident_tile(cfg, h, 5))]
    assert keys == want  # 64 heads once for its two sizes
    assert g.precompile_keys("rules", False) == []


def test_split_rule_times_what_fits_beside_the_pick(capsys):
    """--split-rule-sizes (bench, all, or `rules` alone for a short device budget) times every
    split tile whose CTAs fit the SMs, the unsplit tile and launch_tile's pick; bad sizes are
    refused before any GPU work."""
    from benchmarks.dspark_draft_attn import draft_attn_gpu as g

    shape = lambda t: (t.heads_per_cta, t.queries_per_cta, t.block_kv, t.kv_splits)  # noqa: E731
    # R = 6 x 16 heads: 16 x 1 would be 150 CTAs; 4 x N over 5 fits the SMs but not the clusters
    pick, tiles = g.split_rule_tiles(6, 16, (9, 0), 132)
    assert [shape(t) for t in tiles] == [(4, 0, 32, 5), (4, 0, 64, 3), (8, 0, 64, 3), (8, 0, 64, 1)]
    assert pick == g.dc.launch_tile(g.dc.select_tile_config(16, 5, (9, 0)), 6, 16, 133, 132, (9, 0), 5)
    assert shape(pick) == (4, 0, 64, 3)
    # the pick is timed even where it is no split tile (the KV-resident one at R = 256)
    big = g.split_rule_tiles(256, 64, (9, 0), 132)[1]
    assert any(t.resident for t in big) and not any(t.kv_splits > 1 for t in big)
    # N = 7: R = 1 x 64 heads takes 32 x 1 (16 x 1 would be 4 x 7 x 5 = 140 CTAs), timed beside
    # the other split tiles and the unsplit one; at N = 5 it takes 16 x 1
    pick7, tiles7 = g.split_rule_tiles(1, 64, (9, 0), 132, 7)
    assert shape(pick7) == (32, 1, 32, 5) and shape(g.split_rule_tiles(1, 64, (9, 0), 132)[0]) == (16, 1, 32, 5)
    assert [shape(t) for t in tiles7] == [(32, 1, 32, 5), (4, 0, 32, 5), (4, 0, 64, 3), (8, 0, 64, 3), (64, 1, 64, 1)]
    for bad in ("1x7", "1x64x6", "1x64x7x1"):
        with pytest.raises(SystemExit) as e:
            g.main(["rules", "--split-rule-sizes", bad])
        assert e.value.code == 2 and f"--split-rule-sizes {bad!r}" in capsys.readouterr().err


def test_kv_resident_tile_rules():
    """The KV-resident kernel (large SM90 batches): a CTA a (request, head group) looping over
    `passes` query groups of one 64-row wgmma tile each, 2 x 64 + 16 resident slots (>= the
    window of 128 + N) in SM90's shared memory. Never SM12x (its 99 KB do not hold them); the
    CTA count follows the passes."""
    for h, n, heads, queries, ctas in ((64, 5, 64, 1, 1), (64, 7, 64, 1, 1), (32, 5, 32, 2, 1),
                                        (16, 5, 16, 4, 1), (8, 7, 8, 7, 1)):
        t = dc.resident_tile(dc.select_tile_config(h, n, (9, 0)), h, n)
        assert (t.heads_per_cta, dc.cta_queries(n, t), dc.launch_ctas(t, 3, h, n)) == (heads, queries, 3 * ctas)
        assert dc.tile_rule_violations(t, n) == [], (h, n)
        assert dc.resident_smem_bytes(t, n) <= dc.SM90_SMEM_BYTES
        assert t.block_kv * t.resident_tiles + t.tail_kv >= 128 + n
    split = dc.resident_tile(dc.select_tile_config(64, 5, (9, 0)), 64, 5, passes=3)
    assert dc.launch_ctas(split, 4, 64, 5) == 8  # 3 + 2 passes a request
    assert not dc.resident_kv(dc.select_tile_config(64, 5, (12, 0)), (12, 0))
    sm12x = dc.select_tile_config(64, 5, (12, 0))
    assert not dc.launch_tile(sm12x, 512, 64, 192, 188, (12, 0), 5).resident
    # what the rules refuse: a third 64-token tile (no room), 80 rows a pass, a split
    big = dataclasses.replace(split, resident_tiles=3)
    assert any("shared memory" in v for v in dc.tile_rule_violations(big, 5))
    assert dc.tile_rule_violations(dataclasses.replace(split, heads_per_cta=16, queries_per_cta=5), 5)
    assert dc.tile_rule_violations(dataclasses.replace(split, kv_splits=2), 5)
    assert dc.tile_rule_violations(dataclasses.replace(split, tail_kv=8), 5)


def test_cluster_capacity_probe_lays_out_cuda_h_structs():
    """benchmarks/dspark_draft_attn/cluster_capacity.py asks the driver how many clusters run at
    once (cuOccupancyMaxActiveClusters) through ctypes copies of cuda.h's CUlaunchConfig and
    CUlaunchAttribute: a wrong offset would pass garbage to the driver on the GPU. The query
    itself needs CUDA (the GPU benchmark records it in its env)."""
    import ctypes

    from benchmarks.dspark_draft_attn import cluster_capacity as cc

    assert (ctypes.sizeof(cc.LaunchConfig), ctypes.sizeof(cc.LaunchAttribute)) == (56, 72)
    assert (cc.LaunchConfig.sharedMemBytes.offset, cc.LaunchConfig.hStream.offset) == (24, 32)
    assert (cc.LaunchConfig.attrs.offset, cc.LaunchConfig.numAttrs.offset) == (40, 48)
    assert cc.LaunchAttribute.value.offset == 8
    cfg, attr = cc.launch_config(5, 256, 140 * 1024)
    assert cfg.gridDimX % 5 == 0 and cfg.blockDimX == 256 and cfg.numAttrs == 1
    assert cfg.attrs.contents.id == 4 and cfg.attrs.contents.value.clusterDim.x == 5


def test_draft_layer_passes_the_rows_live_slots(kernel_module, monkeypatch):
    """The draft layer's forward hands the wrapper window + N as the rows' live slots (what
    upstream's DSpark index kernel writes at most), so small batches split a row into 5 tiles of
    32 tokens, not the 6 of its 192-wide index. The layer's state is a stand-in (building the
    real layer needs a model config); its forward_mqa is the overlay's."""
    from vllm.models.deepseek_v4.nvidia import tilelang_draft_attn

    calls = []
    monkeypatch.setattr(kernel_module, "dspark_draft_attention", lambda *a, **kw: calls.append(kw))
    num_tokens, page = 10, dc.fp8_ds_mla_page_bytes(64)
    swa = types.SimpleNamespace(
        num_prefills=0,
        num_decode_tokens=num_tokens,
        decode_swa_indices=torch.zeros(num_tokens, 1, 192, dtype=torch.int32),
        decode_swa_lens=torch.zeros(num_tokens, dtype=torch.int32),
    )
    context = types.SimpleNamespace(attn_metadata={"swa": swa})
    monkeypatch.setattr(tilelang_draft_attn, "get_forward_context", lambda: context)
    layer = types.SimpleNamespace(
        swa_cache_layer=types.SimpleNamespace(prefix="swa", block_size=64,
                                              kv_cache=torch.zeros(2, page, dtype=torch.uint8)),
        swa_index_width=dc.dspark_index_width(128, 5),
        live_slots=dc.dspark_live_slots(128, 5),
        attn_sink=torch.zeros(64),
        num_draft_queries=5,
        scale=512**-0.5,
    )
    q = torch.zeros(num_tokens, 64, 512, dtype=torch.bfloat16)
    tilelang_draft_attn.DeepseekV4TileLangDraftAttention.forward_mqa(layer, q, None, None, torch.empty_like(q))
    assert len(calls) == 1 and calls[0]["live_slots"] == 133 and calls[0]["num_queries"] == 5
    assert calls[0]["page_bytes"] == page


def test_all_compiles_and_runs_the_check_before_the_rest(monkeypatch, tmp_path):
    """`all` compiles the check's kernels, runs the check, then compiles only the kernels the
    check did not need, so a run its time cap cuts short still has its correctness verdict
    (H100 run 50: compiling every kernel first took the whole 123 s cap). The GPU parts are
    stand-ins here (no CUDA): the test records the order of the steps."""
    from benchmarks.dspark_draft_attn import draft_attn_gpu as g

    steps = []
    keys_of = {"check": ["unsplit", "split"], "all": ["unsplit", "split", "sweep_a", "sweep_b"]}
    monkeypatch.setattr(g.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(g.torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(g, "env_info", lambda: {})
    monkeypatch.setattr(g, "precompile_keys", lambda what, *a, **kw: list(keys_of[what]))
    monkeypatch.setattr(g, "precompile", lambda keys, procs: steps.append(("compile", keys)) or dict(
        keys=len(keys), seconds=0.0, errors=[]))
    monkeypatch.setattr(g, "correctness_matrix", lambda *a, **kw: steps.append(("check",)) or dict(ok=True))
    monkeypatch.setattr(g, "print_correctness", lambda *a: None)
    monkeypatch.setattr(g, "benchmark", lambda *a, **kw: steps.append(("bench",)) or dict(rows=[]))
    monkeypatch.setattr(g, "sweep", lambda *a, **kw: steps.append(("sweep",)) or dict(rows=[]))
    out = tmp_path / "all.json"
    assert g.main(["all", "--json", str(out)]) == 0
    assert steps == [
        ("compile", ["unsplit", "split"]), ("check",), ("compile", ["sweep_a", "sweep_b"]), ("bench",), ("sweep",)
    ]
    rep = json.loads(out.read_text())
    assert rep["precompile"]["keys"] == 2 and rep["precompile_rest"]["keys"] == 2
    # one part alone compiles what it needs, once, before it runs
    steps.clear()
    assert g.main(["check", "--json", str(out)]) == 0
    assert steps == [("compile", ["unsplit", "split"]), ("check",)]
    steps.clear()  # --compile-procs 0: each kernel compiles as it is first launched
    assert g.main(["all", "--compile-procs", "0", "--json", str(out)]) == 0
    assert steps == [("check",), ("bench",), ("sweep",)]
