# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Layout, tile configuration and fp32 reference of the DSpark draft attention.

Pure PyTorch (no TileLang import), shared by the TileLang kernel in
``dspark_draft_attn_tilelang`` and by CPU tests.

fp8_ds_mla page (block_size tokens, page stride padded to 576 B): token t's
448 e4m3 NoPE bytes + 64 bf16 RoPE values at t * 576, its 7 UE8M0 scale bytes
(2^(byte - 127), one per 64 NoPE dims) + 1 pad at block_size * 576 + t * 8.
"""

import math
from dataclasses import KW_ONLY, dataclass, replace

import torch

NOPE_DIM = 448
ROPE_DIM = 64
HEAD_DIM = NOPE_DIM + ROPE_DIM
QUANT_BLOCK = 64
TOKEN_DATA_BYTES = NOPE_DIM + 2 * ROPE_DIM  # 576
SCALE_BYTES_PER_TOKEN = 8
LOG2E = 1.4426950408889634
# Running max before any live slot: finite, so exp2(m_prev - m_new) never sees
# inf - inf when a whole tile is masked.
_NEG_LARGE = -(2.0**30)

# Shared memory per block on SM120/SM121 (RTX PRO 6000, RTX 5090, GB10).
SM120_SMEM_BYTES = 101_376
# H100/H200 (SM90) opt-in shared memory per block.
SM90_SMEM_BYTES = 232_448
# Rows of one wgmma M tile (TileLang's SM90 GEMMs here: 64 rows a warpgroup).
WGMMA_ROWS = 64
# Largest portable thread-block cluster (the KV splits of one head group).
MAX_KV_SPLITS = 8


def padded_rows(num_queries: int, heads_per_cta: int, row_tile: int = 16) -> int:
    """Query rows of one CTA, padded to the MMA's row tile: 16 for mma.sync,
    64 for SM90's wgmma (TileLang lowers a GEMM to wgmma when M >= 64 and
    the CTA is whole warpgroups)."""
    return -(-num_queries * heads_per_cta // row_tile) * row_tile


def smem_bytes(
    num_queries: int,
    heads_per_cta: int,
    block_kv: int,
    num_stages: int = 1,
    row_tile: int = 16,
) -> int:
    """Shared memory the kernel allocates: Q, the bf16 KV tile, P, lens, the
    live mask, fp32 scales and the index row (up to 256 slots) once; per
    pipeline stage the tile's raw e4m3 bytes, scale words and RoPE values;
    4 KiB of reduction workspace (an upper bound: the generated SM90 kernel
    used 1 KiB more than the sum of the buffers)."""
    m = padded_rows(num_queries, heads_per_cta, row_tile)
    per_stage = block_kv * (NOPE_DIM + SCALE_BYTES_PER_TOKEN + 2 * ROPE_DIM)
    return (
        4 * 256
        + 2 * m * HEAD_DIM
        + 2 * block_kv * HEAD_DIM
        + 2 * m * block_kv
        + 4 * m
        + block_kv
        + 4 * block_kv * SCALE_BYTES_PER_TOKEN
        + max(num_stages, 1) * per_stage
        + 4096
    )


@dataclass(frozen=True)
class TileConfig:
    heads_per_cta: int
    block_kv: int
    threads: int
    num_stages: int = 2
    # rows per batched softmax all-reduce; must divide a thread's rows
    # (2 * padded_rows // row_tile). 1 = one all-reduce per row; on the H200
    # 2 (wgmma) was within 1.5 % of it, 6 (mma.sync) up to 10 % faster.
    reduce_batch: int = 1
    # MMA row tile the query rows are padded to: 16 (mma.sync) or 64 (wgmma,
    # SM90 only, whole warpgroups)
    row_tile: int = 16
    # the options below by name only: a field removed or added would shift a
    # positional call's values silently into the wrong ones
    _: KW_ONLY
    # a CTA takes this many of the request's consecutive
    # queries (0 = all N), so the plain kernel's wide head groups (64 heads x
    # 1 query) fill the 64-row wgmma tile (_fill_wgmma_rows)
    queries_per_cta: int = 0
    # plain kernel only: the KV tiles of a (request, head group) dealt to
    # this many CTAs of one cluster, merged at the end (launch_tile)
    kv_splits: int = 1
    # plain kernel only: Q loaded with cp.async before the index reads (its
    # DRAM trip overlaps them) instead of after
    q_async: bool = False
    # plain kernel, split launches, L2 merge: every split's rows of the CTA's
    # merge copied into shared memory before the factor pass, so the two L2
    # reads overlap (H200 run 29: R = 1 0.8-1.3 us faster; split_tiles sets
    # it where it fits)
    merge_prefetch: bool = False
    # KV-resident kernel (dspark_draft_attn_resident_tilelang, SM90, large
    # batches): a CTA dequantises its request's live slots once into
    # resident_tiles bf16 tiles of block_kv rows and a tail of tail_kv, and
    # loops over `passes` of its request's query groups (0 = all of them)
    resident: bool = False
    passes: int = 0
    resident_tiles: int = 2
    tail_kv: int = 16


def query_groups(num_queries: int, queries_per_cta: int) -> tuple[int, int]:
    """(queries a CTA, CTAs a request and head group) for queries_per_cta
    (0 = all of the request's)."""
    per_cta = min(queries_per_cta or num_queries, num_queries)
    return per_cta, -(-num_queries // per_cta)


def cta_queries(num_queries: int, cfg: TileConfig) -> int:
    """Queries one CTA handles (0 in the config: all of the request's)."""
    return query_groups(num_queries, cfg.queries_per_cta)[0]


def tile_rule_violations(cfg: TileConfig, num_queries: int) -> list[str]:
    """Why TileLang could not build (or would spill) this CTA shape; [] if it can.

    Both GEMMs split N over the warps (mma.sync) or warpgroups (wgmma), each
    taking a multiple of 8 columns; a thread holds 2 rows of each 16-row
    (mma.sync) or 64-row (wgmma) tile, and a batched all-reduce must divide
    them; the fp32 output accumulator, rows * 512 / threads floats a thread,
    must stay <= 128.
    """
    if cfg.resident:
        return _resident_rule_violations(cfg, num_queries)
    rows = padded_rows(cta_queries(num_queries, cfg), cfg.heads_per_cta, cfg.row_tile)
    bad = []
    if cfg.row_tile == 64:
        if cfg.threads % 128:
            bad.append("wgmma needs whole warpgroups (threads % 128 == 0)")
        splits = cfg.threads // 128
    elif cfg.row_tile == 16:
        splits = cfg.threads // 32
    else:
        return [f"row_tile must be 16 or 64, got {cfg.row_tile}"]
    if cfg.block_kv % max(splits, 1) or (cfg.block_kv // max(splits, 1)) % 8:
        bad.append(f"block_kv {cfg.block_kv} is not a multiple of 8 columns a split")
    if cfg.block_kv % 32:
        # per-token loops guard tx < block_kv; tilelang 0.1.15 refuses the
        # barrier inside a guard that splits a warp (80 compiled with 0.1.12)
        bad.append(f"block_kv {cfg.block_kv} is not a multiple of a warp")
    if rows * HEAD_DIM // cfg.threads > 128:
        bad.append(f"{rows * HEAD_DIM // cfg.threads} accumulator floats per thread")
    if (2 * rows // cfg.row_tile) % cfg.reduce_batch:
        bad.append(f"reduce_batch {cfg.reduce_batch} does not divide a thread's rows")
    if not 1 <= cfg.kv_splits <= MAX_KV_SPLITS:
        bad.append(f"kv_splits {cfg.kv_splits} is not a cluster size in 1..8")
    if cfg.merge_prefetch and cfg.kv_splits == 1:
        bad.append("merge_prefetch copies the L2 merge's slices (a split launch's)")
    if cfg.merge_prefetch and _tile_smem_bytes(num_queries, cfg) > SM90_SMEM_BYTES:
        bad.append(f"merge_prefetch needs {_tile_smem_bytes(num_queries, cfg)} B")
    return bad


def resident_smem_bytes(cfg: TileConfig, num_queries: int) -> int:
    """Shared memory of the KV-resident kernel: the resident bf16 tiles and
    the tail, Q (one wgmma tile of rows), P for a tile and for the tail, the
    slots, their scale words and bf16 scales and the rows' lengths, plus 4 KiB
    for the four reductions' workspaces (sm_90a codegen: 231,680 B for the
    default)."""
    rows = padded_rows(cta_queries(num_queries, cfg), cfg.heads_per_cta, WGMMA_ROWS)
    cap = cfg.block_kv * cfg.resident_tiles + cfg.tail_kv
    return (
        2 * cap * HEAD_DIM
        + 2 * rows * HEAD_DIM
        + 2 * rows * (cfg.block_kv + cfg.tail_kv)
        + 4 * cap
        + 8 * cap
        + 2 * cap * SCALE_BYTES_PER_TOKEN
        + 4 * rows
        + 4096
    )


def _resident_rule_violations(cfg: TileConfig, num_queries: int) -> list[str]:
    """The KV-resident kernel: one wgmma row tile a pass over two warpgroups
    (each GEMM's N split in two multiples of 8), no KV split, the resident
    tiles, Q and P within SM90's shared memory."""
    bad = []
    rows = cta_queries(num_queries, cfg) * cfg.heads_per_cta
    if cfg.threads != 256 or cfg.row_tile != WGMMA_ROWS:
        bad.append("the KV-resident kernel runs 2 wgmma warpgroups (256 threads)")
    if rows > WGMMA_ROWS:
        bad.append(f"{rows} rows > {WGMMA_ROWS} (one wgmma row tile a pass)")
    if cfg.block_kv % 16 or cfg.tail_kv % 16 or cfg.tail_kv < 16:
        bad.append("block_kv and tail_kv: 2 warpgroups x a multiple of 8, tail >= 16")
    if cfg.kv_splits != 1 or cfg.merge_prefetch:
        bad.append("the KV-resident kernel does not split KV")
    if cfg.passes < 0 or cfg.resident_tiles < 1:
        bad.append("passes >= 0 and resident_tiles >= 1")
    smem = resident_smem_bytes(cfg, num_queries)
    if smem > SM90_SMEM_BYTES:
        bad.append(f"{smem} B of shared memory")
    return bad


def merge_slice_rows(rows: int, kv_splits: int, merge_prefetch: bool) -> int:
    """Rows of the output one CTA of a split launch merges, of a CTA's rows
    (even with merge_prefetch: TileLang 0.1.12 finds no layout for an odd-row
    slice's copy, N = 7)."""
    slice_rows = -(-rows // kv_splits)
    return slice_rows + slice_rows % 2 if merge_prefetch else slice_rows


def scratch_rows(
    queries: int,
    heads_per_cta: int,
    row_tile: int,
    kv_splits: int,
    merge_prefetch: bool,
) -> int:
    """Rows of one split's partial state in the L2 scratch: the CTA's padded
    rows, or all its cluster's merge slices where those run past them (the
    merge_prefetch copy reads whole slices; 16 rows over 5 splits are 5
    slices of 4)."""
    m_pad = padded_rows(queries, heads_per_cta, row_tile)
    if not merge_prefetch:
        return m_pad
    rows = queries * heads_per_cta
    return max(m_pad, merge_slice_rows(rows, kv_splits, True) * kv_splits)


def _tile_smem_bytes(num_queries: int, cfg: TileConfig) -> int:
    if cfg.resident:
        return resident_smem_bytes(cfg, num_queries)
    loop = smem_bytes(
        cta_queries(num_queries, cfg),
        cfg.heads_per_cta,
        cfg.block_kv,
        cfg.num_stages,
        cfg.row_tile,
    )
    if not cfg.merge_prefetch:
        return loop
    # every split's fp32 rows of the CTA's merge slice; TileLang places them
    # in the loop's buffers, dead by then (sm_90a codegen: the total stays
    # the loop's 182 KB for every split tile at N = 5 and 7)
    rows = cta_queries(num_queries, cfg) * cfg.heads_per_cta
    slice_rows = merge_slice_rows(rows, cfg.kv_splits, cfg.merge_prefetch)
    prefetch = 4 * cfg.kv_splits * slice_rows * HEAD_DIM
    return max(loop, prefetch + 4 * 256 + 4096)


def select_tile_config(
    num_heads: int, num_queries: int, capability: tuple[int, int]
) -> TileConfig:
    """Pick the CTA shape for an arch (the rules: tile_rule_violations).

    The fp32 output accumulator, rows * 512 / threads floats a thread, must
    stay <= 128, so heads_per_cta halves for long drafts; num_stages=2
    gathers the next tile's bytes during this tile's math and is dropped to 1
    where it does not fit.

    SM90 (measured on the H200, 2026-12-03): heads_per_cta=8, block_kv=64,
    256 threads, one stage, rows padded to 64 so both GEMMs are wgmma (1.3-1.4x
    faster than the mma.sync shape with rows padded to 16; two stages were
    slower in every sweep), Q loaded by cp.async; at 64 and 32 heads a wide
    head group x fewer queries instead (_fill_wgmma_rows: fewer CTAs); small
    batches split the KV tiles over a cluster with narrower tiles
    (launch_tile, chosen per launch).
    SM12x: heads_per_cta=4, block_kv=32, threads=128, mma.sync, chosen only
    to fit 101,376 B of shared memory per block and the rules above; these
    values are UNTESTED on SM120/SM121 hardware (none was available): run
    the self-check there first.
    """
    if num_heads % 8 != 0:
        raise ValueError(f"num_heads must be a multiple of 8, got {num_heads}")
    if capability[0] == 12:
        # UNTESTED on SM12x hardware
        cfg = TileConfig(heads_per_cta=4, block_kv=32, threads=128, num_stages=1)
        budget = SM120_SMEM_BYTES
    elif capability[0] == 9:
        # rows padded to 64 so both GEMMs lower to wgmma; Q by cp.async
        # ahead of the index reads was 0-5 % faster on the H200
        cfg = TileConfig(
            heads_per_cta=8,
            block_kv=64,
            threads=256,
            num_stages=1,
            row_tile=64,
            q_async=True,
        )
        budget = SM90_SMEM_BYTES
    else:
        cfg = TileConfig(heads_per_cta=8, block_kv=64, threads=256, num_stages=1)
        budget = SM90_SMEM_BYTES
    while (
        padded_rows(num_queries, cfg.heads_per_cta, cfg.row_tile)
        * HEAD_DIM
        // cfg.threads
        > 128
        and cfg.heads_per_cta > 1
    ):
        cfg = replace(cfg, heads_per_cta=cfg.heads_per_cta // 2)
    if cfg.row_tile == WGMMA_ROWS:
        cfg = _fill_wgmma_rows(cfg, num_heads, num_queries)
    while _tile_smem_bytes(num_queries, cfg) > budget and cfg.num_stages > 1:
        cfg = replace(cfg, num_stages=cfg.num_stages - 1)
    if _tile_smem_bytes(num_queries, replace(cfg, num_stages=1)) > budget:
        raise ValueError(
            f"no tile for num_queries={num_queries} fits {budget} B of shared memory"
        )
    return cfg


def _fill_wgmma_rows(cfg: TileConfig, num_heads: int, num_queries: int) -> TileConfig:
    """The widest head group (<= 64 heads) with as many queries as fill the
    64-row wgmma tile, where that needs fewer CTAs a request than cfg: at
    N = 5, 64 heads x 1 query (5 CTAs, 64 live rows each) instead of 8 heads x
    5 queries (8 CTAs, 40 of 64 rows live), 32 x 2 (3 instead of 4). A CTA's
    chain costs about the same at 40 or 64 live rows (the GEMMs are 64 rows
    either way), so large batches finish in fewer waves. H100 runs 32 and 33,
    graph, cold L2, same run: R = 256, 64 heads 339 / 319 -> 213 us, R = 64
    94 / 90 -> 70. At an equal count (16 heads x 4 queries against 8 x 5) it
    measured 7 % faster in one run, 1 % faster and 2 % slower in the next:
    the 8-head tile stays there."""
    heads = max(h for h in range(8, WGMMA_ROWS + 1, 8) if num_heads % h == 0)
    queries = max(1, WGMMA_ROWS // heads)
    # 0: all of the request's queries (one spelling for that tile)
    wide = replace(
        cfg,
        heads_per_cta=heads,
        queries_per_cta=queries if queries < num_queries else 0,
    )
    if launch_ctas(wide, 1, num_heads, num_queries) < launch_ctas(
        cfg, 1, num_heads, num_queries
    ):
        return wide
    return cfg


def resident_kv(cfg: TileConfig, capability: tuple[int, int]) -> bool:
    """Whether cfg's arch and kernel can run the KV-resident kernel: SM90
    only (its 226 KB of shared memory does not fit SM12x's 99 KB)."""
    return capability[0] == 9


def resident_tile(
    cfg: TileConfig, num_heads: int, num_queries: int, passes: int = 0
) -> TileConfig:
    """The KV-resident tile for cfg's arch: the widest head group with as
    many queries as fill a 64-row wgmma tile a pass (64 heads x 1 query,
    32 x 2, 16 x 4, 8 x N), two resident 64-token tiles and a 16-token tail
    (144 slots >= the window of 128 + N)."""
    heads = max(h for h in range(8, WGMMA_ROWS + 1, 8) if num_heads % h == 0)
    queries = max(1, WGMMA_ROWS // heads)
    return replace(
        cfg,
        heads_per_cta=heads,
        queries_per_cta=queries if queries < num_queries else 0,
        block_kv=64,
        num_stages=1,
        kv_splits=1,
        merge_prefetch=False,
        resident=True,
        passes=passes,
        resident_tiles=2,
        tail_kv=16,
    )


def split_kv_splits(
    cfg: TileConfig, live_slots: int, capability: tuple[int, int]
) -> int:
    """The kv_splits of a split launch of this shape (one CTA a KV tile of a
    row's live slots, up to a portable cluster), 1 where launches never split:
    SM90 only, where it was measured; SM12x keeps one CTA a group (clusters
    exist there, but the split is UNTESTED on SM12x hardware). live_slots:
    the most live slots an index row can hold (dspark_live_slots: DSpark's
    window + N = 133 of a 192-wide row, 5 tiles of 32; a longer row is still
    right, its CTAs taking several tiles)."""
    if capability[0] != 9:
        return 1
    return min(-(-live_slots // cfg.block_kv), MAX_KV_SPLITS)


def dspark_live_slots(window_size: int, num_queries: int) -> int:
    """The most live slots of a DSpark non-causal SWA index row: the window
    and the N draft positions (the index kernel's lens; the row's width,
    dspark_index_width, rounds that up to 64)."""
    return window_size + num_queries


# Clusters of each size (one CTA an SM) the driver lets run at once on a
# 132-SM SM90 part: cuOccupancyMaxActiveClusters on an H100 80GB HBM3 (run 47,
# benchmarks/dspark_draft_attn/cluster_capacity.py, 140 KB of shared memory
# and 256 threads a CTA, as the split tiles take). A cluster's CTAs share a
# GPC and the GPCs differ in size, so this is not SMs / size (39 of 3, not 44).
_MEASURED_CLUSTERS = {132: {2: 66, 3: 39, 4: 30, 5: 22, 6: 17, 7: 15, 8: 15}}


def co_resident_clusters(sm_count: int, cluster_size: int) -> int:
    """Clusters of cluster_size CTAs (one an SM) an SM90 GPU runs at once: the
    driver's figure measured for 132 SMs (H100; the H200 has 132 too, its
    figure not measured: the GPU benchmark records it), elsewhere a lower
    bound (GPCs of at most 18 SMs, so at least sm_count // 18 of them, each of
    at least 14). A launch of more clusters runs as two waves: H100 run 47,
    R = 6 x 16 heads, 24 clusters of 5 took 19.4 us against 12.4 for 24 of
    3; R = 21, 42 clusters of 3 took 27.4 against 22.6 unsplit."""
    if cluster_size <= 1:
        return sm_count
    measured = _MEASURED_CLUSTERS.get(sm_count)
    if measured is not None and cluster_size in measured:
        return measured[cluster_size]
    return (sm_count // 18) * (14 // cluster_size)


# Split launch tiles, (heads a CTA, KV tile, queries a CTA: 0 = all N),
# finest first: a launch takes the first whose CTAs (one a KV tile of each
# head group and query group) all get an SM and whose clusters all run at
# once (co_resident_clusters); more than that run as two waves (H100 run 47:
# 1.2-1.6x slower), and fewer splits than tiles (2 CTAs for 3 tiles) measured
# from 5 % faster to 4 % slower than none (runs 13 and 16).
# Short tiles shorten each CTA's chain, and the merge moves each CTA's live
# rows (still padded to 64 for wgmma; the stores stop at the last live row's
# 16-row slice), so narrow row groups merge faster:
# - 16 heads x 1 query (16 rows, one warp a warpgroup storing), 32-token
#   tiles over 5 CTAs: H100 runs 46-47, R = 1, 9.5-9.8 / 9.0-9.1 us at 64 /
#   16 heads against 11.5 / 9.6 for 4 heads x N over 6 (runs 24-45's R = 1
#   tile), faster at every R = 1-4 measured; over 6 CTAs (20 clusters at 64
#   heads, more than run at once) 17.4. Only where 16 heads divide the
#   layer's (8 heads: unmeasured).
# - 32 heads x 1 query, the same tiles: where 16 x 1 has more clusters than
#   run at once. H100 run 52, one run: R = 2 x 64 heads 12.4 us against
#   13.1-13.5 for the 4 and 8 heads x N 64-token tiles; R = 3 x 32 11.4
#   against 12.5; R = 4 x 32 12.7 against 13.2; slower than 16 x 1 where that
#   fits (R = 2 x 32: 10.4 against 9.8; R = 1: 10.1 against 9.6, run 49).
#   Not timed: the N = 7 picks.
# - 4 heads x N, 32-token tiles: the R = 1 default of runs 24-45 (6 CTAs;
#   5, one a live tile, measured the same or up to 4 % faster in run 46).
# - 4 heads x N, then 8 heads x N, 64-token tiles over 3 CTAs: R = 2 at 64
#   heads and R = 8 at 16 (H200 run 24: 15.4-15.5 and 16.3 us; run 46: 13.4
#   against 17.8 for the 16 x 1 tile's 200 CTAs).
SPLIT_TILES = ((16, 32, 1), (32, 32, 1), (4, 32, 0), (4, 64, 0), (8, 64, 0))


def split_tiles(
    cfg: TileConfig,
    live_slots: int,
    capability: tuple[int, int],
    num_queries: int,
    num_heads: int,
) -> list[TileConfig]:
    """The split tiles a launch of this shape may take, in SPLIT_TILES order,
    each with merge_prefetch where its rules allow it; [] where launches
    never split (split_kv_splits). A tile of all N queries takes at most
    cfg's heads a CTA; one of fewer queries exactly its heads, where they
    divide num_heads."""
    if split_kv_splits(cfg, live_slots, capability) == 1:
        return []
    tiles: list[TileConfig] = []
    for heads, block_kv, queries in SPLIT_TILES:
        if queries and num_heads % heads:
            continue
        tile = replace(
            cfg,
            heads_per_cta=heads if queries else min(heads, cfg.heads_per_cta),
            queries_per_cta=queries,
            block_kv=block_kv,
        )
        tile = replace(tile, kv_splits=split_kv_splits(tile, live_slots, capability))
        if tile.kv_splits == 1:
            continue
        prefetch = replace(tile, merge_prefetch=True)
        if not tile_rule_violations(prefetch, num_queries):
            tile = prefetch
        elif tile_rule_violations(tile, num_queries):
            continue
        if tile not in tiles:
            tiles.append(tile)
    # Not the wide unsplit tile (_fill_wgmma_rows) over a cluster: 64 heads x
    # 1 query in 3 splits measured 39 us at R = 8 against 23 unsplit (H100
    # run 33; 40 clusters of 3 and a 64-row merge).
    return tiles


def launch_ctas(
    tile: TileConfig, num_reqs: int, num_heads: int, num_queries: int
) -> int:
    """CTAs of a launch: one per (request, query group, head group, KV split);
    the KV-resident kernel's CTA takes `passes` query groups."""
    q_groups = query_groups(num_queries, tile.queries_per_cta)[1]
    if tile.resident:
        q_groups = -(-q_groups // resident_passes(tile, num_queries))
    return num_reqs * q_groups * (num_heads // tile.heads_per_cta) * tile.kv_splits


# A KV-resident CTA of P passes costs about RESIDENT_GATHER_COST +
# RESIDENT_PASS_COST * P unsplit streaming CTAs (one SM each either way), and
# a launch of either kernel takes launch_waves of its CTAs: a short last wave
# costs LAST_WAVE_FIXED of a full one (its CTAs' own latency) plus the rest in
# proportion to the SMs it fills (H100 run 63: 2 streaming CTAs past one wave
# cost 10.6 of a full wave's ~19 us at 16 heads, 1 resident CTA 23 of ~36).
# Fitted on H100 runs 63-64 (the cp.async-gather kernel, graph, cold L2, both
# tiles timed at 24 sizes of 16 / 32 / 64 heads, R = 45-199, around the
# flips) and R = 256 (runs 37 and 62): right at all 26, where the previous fit
# (integer waves, 0.8 + 0.5 P, from run 36's kernel) was right at 20; the
# sizes nearest a flip differ by 1-3 %.
RESIDENT_GATHER_COST = 0.55
RESIDENT_PASS_COST = 0.6
LAST_WAVE_FIXED = 0.55


def resident_passes(tile: TileConfig, num_queries: int) -> int:
    """Query groups (64-row wgmma tiles) one KV-resident CTA loops over."""
    q_groups = query_groups(num_queries, tile.queries_per_cta)[1]
    return min(tile.passes or q_groups, q_groups)


def launch_waves(
    ctas: int, sm_count: int, last_wave_fixed: float = LAST_WAVE_FIXED
) -> float:
    """Waves of a launch of one-SM CTAs in the model above: the full ones, and
    a short last one at last_wave_fixed plus its share of the SMs (another
    value: the refit's search, benchmarks/dspark_draft_attn)."""
    full, last = divmod(ctas, sm_count)
    if not last:
        return float(full)
    return full + last_wave_fixed + (1 - last_wave_fixed) * last / sm_count


def resident_pays(
    streaming: TileConfig,
    resident: TileConfig,
    num_reqs: int,
    num_heads: int,
    num_queries: int,
    sm_count: int,
) -> bool:
    """Whether the KV-resident launch beats the streaming one in the wave
    model above: its waves x its CTA cost against the streaming waves. One
    pass a CTA never pays (the same CTAs, each gathering all at once)."""

    def waves(tile: TileConfig) -> float:
        ctas = launch_ctas(tile, num_reqs, num_heads, num_queries)
        return launch_waves(ctas, sm_count)

    cta_cost = RESIDENT_GATHER_COST + RESIDENT_PASS_COST * resident_passes(
        resident, num_queries
    )
    return waves(resident) * cta_cost < waves(streaming)


def launch_tile(
    cfg: TileConfig,
    num_reqs: int,
    num_heads: int,
    live_slots: int,
    sm_count: int,
    capability: tuple[int, int],
    num_queries: int,
) -> TileConfig:
    """The tile of one launch: the first split tile (split_tiles) whose CTAs
    all get an SM and whose clusters all run at once while the GPU is nearly
    empty; the KV-resident tile where it pays (resident_pays: large SM90
    batches); else cfg unsplit. live_slots: split_kv_splits'."""
    for tile in split_tiles(cfg, live_slots, capability, num_queries, num_heads):
        ctas = launch_ctas(tile, num_reqs, num_heads, num_queries)
        clusters = ctas // tile.kv_splits
        if ctas <= sm_count and clusters <= co_resident_clusters(
            sm_count, tile.kv_splits
        ):
            return tile
    unsplit = replace(cfg, kv_splits=1)
    if resident_kv(cfg, capability):
        resident = resident_tile(cfg, num_heads, num_queries)
        if resident_pays(unsplit, resident, num_reqs, num_heads, num_queries, sm_count):
            return resident
    return unsplit


def dspark_draft_attention_ref(
    q: torch.Tensor,
    swa_cache: torch.Tensor,
    indices: torch.Tensor,
    lens: torch.Tensor,
    attn_sink: torch.Tensor,
    *,
    scale: float,
    block_size: int,
    page_bytes: int,
) -> torch.Tensor:
    """fp32 PyTorch reference of the kernel's math (any device), [T, H, 512].

    Rows with no live slot are zeros (the kernel's contract; a plain softmax
    over the sink alone would also give zeros except when the sink is -inf).
    """
    num_tokens, num_heads, _ = q.shape
    width = indices.shape[-1]
    idx = indices.reshape(num_tokens, width).long()
    live = (torch.arange(width, device=q.device)[None] < lens[:, None].long()) & (
        idx >= 0
    )
    kv = dequant_fp8_ds_mla(
        swa_cache, idx.clamp(min=0).flatten(), block_size, page_bytes
    ).view(num_tokens, width, HEAD_DIM)
    kv = kv.masked_fill(~live[..., None], 0.0)
    s = torch.einsum("thd,twd->thw", q.float(), kv) * scale
    s = s.masked_fill(~live[:, None, :], float("-inf"))
    sink = attn_sink.float().view(1, num_heads, 1).expand(num_tokens, num_heads, 1)
    p = torch.softmax(torch.cat([s, sink], -1), -1)[..., :-1]
    o = torch.einsum("thw,twd->thd", p.nan_to_num(0.0), kv)
    return o.masked_fill(~live.any(-1)[:, None, None], 0.0)


def dequant_fp8_ds_mla(
    swa_cache: torch.Tensor, slots: torch.Tensor, block_size: int, page_bytes: int
) -> torch.Tensor:
    """fp8_ds_mla bytes of ``slots`` -> fp32 rows [len(slots), 512]."""
    flat = swa_cache.reshape(-1).view(torch.uint8)
    blk, off = slots // block_size, slots % block_size
    base = blk * page_bytes
    ar = torch.arange(TOKEN_DATA_BYTES, device=slots.device)
    data = flat[(base + off * TOKEN_DATA_BYTES)[:, None] + ar]
    nope = data[:, :NOPE_DIM].contiguous().view(torch.float8_e4m3fn).float()
    rope = data[:, NOPE_DIM:].contiguous().view(torch.bfloat16).float()
    n_scales = NOPE_DIM // QUANT_BLOCK
    sc_at = base + block_size * TOKEN_DATA_BYTES + off * SCALE_BYTES_PER_TOKEN
    sc = flat[sc_at[:, None] + torch.arange(n_scales, device=slots.device)]
    nope = (
        nope.view(-1, n_scales, QUANT_BLOCK) * torch.exp2(sc.float() - 127.0)[..., None]
    )
    return torch.cat([nope.view(-1, NOPE_DIM), rope], -1)


def dspark_index_width(window_size: int, num_queries: int) -> int:
    """Width of the DSpark non-causal SWA index rows (upstream's rule:
    window + N rounded up to 64, compressor_utils.get_dspark_swa_index_width)."""
    return -(-(window_size + num_queries) // 64) * 64


def fp8_ds_mla_page_bytes(block_size: int) -> int:
    """Page stride of the SWA cache: block_size * 584 B rounded up to 576 B."""
    raw = block_size * (TOKEN_DATA_BYTES + SCALE_BYTES_PER_TOKEN)
    return math.ceil(raw / TOKEN_DATA_BYTES) * TOKEN_DATA_BYTES
