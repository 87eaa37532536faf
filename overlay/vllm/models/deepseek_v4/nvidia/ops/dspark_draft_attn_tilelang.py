# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""TileLang decode attention for the DSpark draft of DeepSeek-V4.

The draft layers are SWA-only DSV4 layers: every request has N draft query
tokens that all see the same index list (up to 192 slots of the paged
fp8_ds_mla SWA cache, window 128 + N).  One CTA handles one (request, head
group) and all N queries of it, so each KV tile is gathered and dequantised
once for N * heads_per_cta query rows; at 64 and 32 heads on SM90 a wider
head group takes fewer of the queries instead (64 heads x 1 query), so a CTA
still dequantises once for 64 rows and a request needs fewer CTAs (5, not 8
of 40 rows: queries_per_cta).  The cache is read in place (no window
copy), heads are native (8/16/32/64, no padding to 64), the per-head sink is
folded in at the end, rows with no live slot give zeros, and the output is
written into a caller-owned buffer so the launch can be captured in a CUDA
graph. On SM90, batches too small to fill the GPU split a head group's KV
tiles over the CTAs of a thread-block cluster and merge the partial states
(kv_splits; the scratch is the wrapper's, one per device).

Layout, tile configuration and the fp32 reference: dspark_draft_attn_common.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import torch

from vllm.model_executor.warmup.jit_warmup_tilelang_helper import (
    TileLangLaunchSpec,
    VllmTileLangJitKernel,
    kernel_launcher,
    make_tilelang_warmup_tensor,
)
from vllm.models.deepseek_v4.nvidia.ops.dspark_draft_attn_common import (
    _NEG_LARGE,
    HEAD_DIM,
    LOG2E,
    NOPE_DIM,
    QUANT_BLOCK,
    ROPE_DIM,
    SCALE_BYTES_PER_TOKEN,
    TOKEN_DATA_BYTES,
    TileConfig,
    cta_queries,
    dspark_index_width,
    dspark_live_slots,
    launch_ctas,
    launch_tile,
    merge_slice_rows,
    padded_rows,
    query_groups,
    resident_kv,
    resident_passes,
    resident_tile,
    scratch_rows,
    select_tile_config,
    split_tiles,
)
from vllm.models.deepseek_v4.nvidia.ops.dspark_draft_attn_resident import (
    dspark_draft_attn_resident_tilelang,
)
from vllm.tilelang_utils import T, tilelang_jit


@tilelang_jit
def dspark_draft_attn_tilelang(
    q,
    kv_fp8,
    kv_i64,
    kv_bf16,
    indices,
    lens,
    attn_sink,
    out,
    part_o,
    part_ml,
    num_heads: int,
    num_queries: int,
    width: int,
    block_size: int,
    page_bytes: int,
    scale: float,
    heads_per_cta: int = 8,
    block_kv: int = 64,
    threads: int = 256,
    num_stages: int = 2,
    reduce_batch: int = 1,
    row_tile: int = 16,
    kv_splits: int = 1,
    q_async: bool = False,
    merge_prefetch: bool = False,
    queries_per_cta: int = 0,
):
    """out[r, n, h] = softmax([scale * q[r, n, h] . K_s for live s] ++ sink[h]) V.

    K = V = the dequantised fp8_ds_mla rows of the request's index list.
    Rows with lens == 0 are written as zeros.

    kv_splits > 1 (small batches, where most SMs would idle): the KV tiles of
    a (request, head group) are dealt round-robin to kv_splits CTAs of one
    thread-block cluster. Each writes its unnormalised partial output and
    row max / sum to part_o / part_ml (L2-resident scratch), the cluster
    barrier (release / acquire) makes them visible, and each CTA then merges
    a slice of the rows: out = sum_s 2^(m_s - M) O_s / (sum_s 2^(m_s - M) l_s
    + 2^(sink - M)), M = max_s m_s (flash-decoding's split-KV merge).
    merge_prefetch (the L2 merge): the CTA's rows of every split's partial
    output are copied into shared memory (cp.async) before the factor pass,
    so their L2 trip overlaps the one for the maxima and sums.
    queries_per_cta (0 = all N): a CTA takes that many consecutive queries
    of its head group, so 64 heads x 1 query fill a 64-row wgmma tile that
    8 heads x 5 queries fill to 40 rows (fewer CTAs for the same work).
    """
    num_reqs = T.dynamic("num_reqs")
    num_blocks = T.dynamic("num_blocks")
    num_parts = T.dynamic("num_parts")
    # (a Python call: TileLang's parser would turn `or` into a TIR Or here)
    qpc, q_groups = query_groups(num_queries, queries_per_cta)
    head_groups = num_heads // heads_per_cta
    # the CTA's rows (the last query group may have fewer live ones)
    rows = qpc * heads_per_cta
    m_pad = padded_rows(qpc, heads_per_cta, row_tile)
    # rows of the merge each CTA of a cluster writes
    merge_rows = merge_slice_rows(rows, kv_splits, merge_prefetch)
    part_rows = scratch_rows(qpc, heads_per_cta, row_tile, kv_splits, merge_prefetch)
    # partial rows a split stores: up to the last live row's 16-row wgmma
    # slice, so the guard is uniform across each warp of the accumulator
    live_pad = -(-rows // 16) * 16
    # Index positions t * block_kv + j of a live tile stay inside the row.
    assert width % block_kv == 0, (width, block_kv)
    scale_log2 = scale * LOG2E
    scale_off = block_size * TOKEN_DATA_BYTES
    assert SCALE_BYTES_PER_TOKEN == 8 and scale_off % 8 == 0 and page_bytes % 8 == 0
    page_words = page_bytes // 2
    tok_words = TOKEN_DATA_BYTES // 2

    q: T.Tensor[[num_reqs, num_queries, num_heads, HEAD_DIM], T.bfloat16]  # type: ignore[no-redef,valid-type]
    kv_fp8: T.Tensor[[num_blocks, page_bytes], T.float8_e4m3fn]  # type: ignore[no-redef,valid-type]
    kv_i64: T.Tensor[[num_blocks, page_bytes // 8], T.int64]  # type: ignore[no-redef,valid-type]
    kv_bf16: T.Tensor[[num_blocks, page_words], T.bfloat16]  # type: ignore[no-redef,valid-type]
    indices: T.Tensor[[num_reqs, num_queries, width], T.int32]  # type: ignore[no-redef,valid-type]
    lens: T.Tensor[[num_reqs, num_queries], T.int32]  # type: ignore[no-redef,valid-type]
    attn_sink: T.Tensor[[num_heads], T.float32]  # type: ignore[no-redef,valid-type]
    out: T.Tensor[[num_reqs, num_queries, num_heads, HEAD_DIM], T.bfloat16]  # type: ignore[no-redef,valid-type]
    part_o: T.Tensor[[num_parts, part_rows, HEAD_DIM], T.float32]  # type: ignore[no-redef,valid-type]
    part_ml: T.Tensor[[num_parts, 2, part_rows], T.float32]  # type: ignore[no-redef,valid-type]

    # Head groups of one request are adjacent in launch order, so the request's
    # KV tiles are still in L2 when its other groups gather them. The splits
    # of a group are one cluster (cluster_dims 1 is a plain launch).
    with T.ClusterKernel(
        head_groups * q_groups * kv_splits,
        num_reqs,
        threads=threads,
        cluster_dims=kv_splits,
    ) as (bx, rid):
        # the CTA's (query group, head group) of the request, and its split
        grp = bx // kv_splits
        split = bx % kv_splits
        gid, q0, live_rows = _cta_rows(
            grp, head_groups, qpc, q_groups, num_queries, heads_per_cta
        )
        q_s = T.alloc_shared([m_pad, HEAD_DIM], T.bfloat16)
        k_s = T.alloc_shared([block_kv, HEAD_DIM], T.bfloat16)
        p_s = T.alloc_shared([m_pad, block_kv], T.bfloat16)
        # the request's whole index row, read once: every tile's gather
        # addresses then come from shared memory, not a dependent global load
        idx_s = T.alloc_shared([width], T.int32)
        fp8_s = T.alloc_shared([block_kv, NOPE_DIM], T.float8_e4m3fn)
        # A token's 8 scale bytes as one word: one 8-byte async copy per token.
        scale_s = T.alloc_shared([block_kv], T.int64)
        rope_s = T.alloc_shared([block_kv, ROPE_DIM], T.bfloat16)
        len_s = T.alloc_shared([m_pad], T.int32)
        live_s = T.alloc_shared([block_kv], T.bool)
        scale_f = T.alloc_shared([block_kv, SCALE_BYTES_PER_TOKEN], T.float32)

        acc_s = T.alloc_fragment([m_pad, block_kv], T.float32)
        acc_o = T.alloc_fragment([m_pad, HEAD_DIM], T.float32)
        m_i = T.alloc_fragment([m_pad], T.float32)
        m_prev = T.alloc_fragment([m_pad], T.float32)
        l_i = T.alloc_fragment([m_pad], T.float32)
        l_tile = T.alloc_fragment([m_pad], T.float32)
        alpha = T.alloc_fragment([m_pad], T.float32)

        if q_async:
            # Q first, as cp.async: its DRAM trip overlaps the lens and
            # index-row reads below instead of following them.
            for qi in T.serial(qpc):
                if q0 + qi < num_queries:
                    T.async_copy(
                        q[
                            rid,
                            q0 + qi,
                            gid * heads_per_cta : (gid + 1) * heads_per_cta,
                            :,
                        ],
                        q_s[qi * heads_per_cta : (qi + 1) * heads_per_cta, :],
                    )
            if q_groups > 1:
                # the last group's missing queries: zeros, not stale bytes
                # (a NaN there would reach -inf + NaN in S)
                for m, d in T.Parallel(m_pad, HEAD_DIM):
                    if m >= live_rows:
                        q_s[m, d] = T.cast(0, T.bfloat16)
            elif rows < m_pad:
                for m, d in T.Parallel(m_pad - rows, HEAD_DIM):
                    q_s[rows + m, d] = T.cast(0, T.bfloat16)

        # All N rows of a request carry the same list (the DSpark index
        # kernel writes one row per request); gather with the longest one.
        max_len = T.alloc_var(T.int32, init=0)
        src_row = T.alloc_var(T.int32, init=0)
        for n in T.serial(num_queries):
            if lens[rid, n] > max_len:
                max_len = lens[rid, n]
                src_row = n
        live_len = T.min(max_len, width)
        for j in T.Parallel(width):
            idx_s[j] = indices[rid, src_row, j]

        # Row m of the CTA is query q0 + m // heads_per_cta, head
        # gid * heads_per_cta + m % heads_per_cta.
        if not q_async:
            for m, d in T.Parallel(m_pad, HEAD_DIM):
                q_s[m, d] = T.if_then_else(
                    m < live_rows,
                    q[
                        rid,
                        T.min(q0 + m // heads_per_cta, num_queries - 1),
                        gid * heads_per_cta + m % heads_per_cta,
                        d,
                    ],
                    T.cast(0, T.bfloat16),
                )
        for m in T.Parallel(m_pad):
            len_s[m] = T.if_then_else(
                m < live_rows,
                lens[rid, T.min(q0 + m // heads_per_cta, num_queries - 1)],
                0,
            )
        T.fill(acc_o, 0)
        T.fill(l_i, 0)
        T.fill(m_i, _NEG_LARGE)
        if q_async:
            T.ptx_wait_group(0)
            T.sync_threads()

        # num_stages > 1: the raw bytes of the next tiles are gathered while
        # this one is dequantised and multiplied (software pipeline).
        # This CTA's tiles: split, split + kv_splits, ... (all of them at 1).
        num_tiles = (
            T.ceildiv(live_len, block_kv)
            if kv_splits == 1
            else T.ceildiv(T.max(T.ceildiv(live_len, block_kv) - split, 0), kv_splits)
        )
        for tt in T.Pipelined(num_tiles, num_stages=num_stages):
            t = tt * kv_splits + split
            # Gather the tile's raw bytes (slots past the live length read
            # slot 0 and are masked below), then dequantise in shared memory,
            # once for every row of the CTA. Plain copies, so the pipeline
            # issues them as async copies.
            for j, d in T.Parallel(block_kv, NOPE_DIM):
                live_slot = _gather_slot(idx_s, t * block_kv + j, live_len)
                fp8_s[j, d] = kv_fp8[
                    live_slot // block_size,
                    (live_slot % block_size) * TOKEN_DATA_BYTES + d,
                ]
            for j in T.Parallel(block_kv):
                live_slot = _gather_slot(idx_s, t * block_kv + j, live_len)
                scale_s[j] = kv_i64[
                    live_slot // block_size, scale_off // 8 + live_slot % block_size
                ]
            for j, d in T.Parallel(block_kv, ROPE_DIM):
                live_slot = _gather_slot(idx_s, t * block_kv + j, live_len)
                rope_s[j, d] = kv_bf16[
                    live_slot // block_size,
                    (live_slot % block_size) * tok_words + NOPE_DIM // 2 + d,
                ]
            for j in T.Parallel(block_kv):
                pos = t * block_kv + j
                live_s[j] = (pos < live_len) & (idx_s[pos] >= 0)
            # 2^(byte - 127) once per (token, 64-dim block), not per element.
            for j, c in T.Parallel(block_kv, SCALE_BYTES_PER_TOKEN):
                scale_f[j, c] = T.exp2(
                    T.cast((scale_s[j] >> (8 * c)) & 255, T.float32) - 127.0
                )
            # Dead slots become zeros so 0 * garbage cannot give NaN in P @ V.
            for j, d in T.Parallel(block_kv, NOPE_DIM):
                k_s[j, d] = T.if_then_else(
                    live_s[j],
                    T.cast(
                        T.cast(fp8_s[j, d], T.float32) * scale_f[j, d // QUANT_BLOCK],
                        T.bfloat16,
                    ),
                    T.cast(0, T.bfloat16),
                )
            for j, d in T.Parallel(block_kv, ROPE_DIM):
                k_s[j, NOPE_DIM + d] = T.if_then_else(
                    live_s[j], rope_s[j, d], T.cast(0, T.bfloat16)
                )

            for m, j in T.Parallel(m_pad, block_kv):
                acc_s[m, j] = T.if_then_else(
                    (t * block_kv + j < len_s[m]) & live_s[j],
                    0,
                    -T.infinity(T.float32),
                )
            T.gemm(q_s, k_s, acc_s, transpose_B=True, policy=T.GemmWarpPolicy.FullCol)

            T.copy(m_i, m_prev)
            # reduce_batch > 1: one block-wide all-reduce (one barrier pair per
            # round) for that many of a thread's rows instead of one per row.
            T.reduce_max(acc_s, m_i, dim=1, clear=False, batch=reduce_batch)
            for m in T.Parallel(m_pad):
                m_i[m] = T.max(m_i[m], m_prev[m])
                alpha[m] = T.exp2((m_prev[m] - m_i[m]) * scale_log2)
            for m, j in T.Parallel(m_pad, block_kv):
                acc_s[m, j] = T.exp2((acc_s[m, j] - m_i[m]) * scale_log2)
            T.reduce_sum(acc_s, l_tile, dim=1, batch=reduce_batch)
            for m in T.Parallel(m_pad):
                l_i[m] = l_i[m] * alpha[m] + l_tile[m]
            for m, d in T.Parallel(m_pad, HEAD_DIM):
                acc_o[m, d] = acc_o[m, d] * alpha[m]
            T.copy(acc_s, p_s)
            T.gemm(p_s, k_s, acc_o, policy=T.GemmWarpPolicy.FullCol)

        if kv_splits == 1:
            # Fold the sink: denominator += exp(sink - m), computed around
            # max(m, sink) so a large sink or a -inf sink cannot overflow.
            for m in T.Parallel(m_pad):
                sink_log2 = attn_sink[gid * heads_per_cta + m % heads_per_cta] * LOG2E
                m_log2 = m_i[m] * scale_log2
                top = T.max(m_log2, sink_log2)
                corr = T.exp2(m_log2 - top)
                denom = l_i[m] * corr + T.exp2(sink_log2 - top)
                alpha[m] = T.if_then_else(
                    (len_s[m] > 0) & (l_i[m] > 0), corr / denom, 0.0
                )
            if m_pad <= block_kv:
                # Through the (now free) KV tile, so the stores to out are 16-byte
                # vectors instead of a fragment's scattered pairs.
                for m, d in T.Parallel(m_pad, HEAD_DIM):
                    k_s[m, d] = T.cast(acc_o[m, d] * alpha[m], T.bfloat16)
                for m, d in T.Parallel(rows, HEAD_DIM):
                    if m < live_rows:
                        out[
                            rid,
                            q0 + m // heads_per_cta,
                            gid * heads_per_cta + m % heads_per_cta,
                            d,
                        ] = k_s[m, d]
            else:
                for m, d in T.Parallel(m_pad, HEAD_DIM):
                    if m < live_rows:
                        out[
                            rid,
                            q0 + m // heads_per_cta,
                            gid * heads_per_cta + m % heads_per_cta,
                            d,
                        ] = acc_o[m, d] * alpha[m]
        else:
            # Publish this split's partial state; the cluster barrier's
            # release / acquire makes it visible to the other CTAs (the CTA
            # barrier before it keeps the compiler from sinking the stores
            # past the barrier's asm, which has no memory clobber).
            part = (rid * (head_groups * q_groups) + grp) * kv_splits
            # live_pad rows: whole warps skip their stores (H200 run 24, R = 1:
            # 14.7 -> 13.4 us); a per-row guard (m < rows) split warps and
            # measured ~3 us slower (runs 14-15)
            for m, d in T.Parallel(m_pad, HEAD_DIM):
                if m < live_pad:
                    part_o[part + split, m, d] = acc_o[m, d]
            for m in T.Parallel(m_pad):
                part_ml[part + split, 0, m] = m_i[m]
                part_ml[part + split, 1, m] = l_i[m]
            T.sync_threads()
            T.cluster_sync()
            row_fac = T.alloc_shared([merge_rows, kv_splits], T.float32)
            recv_o = (
                T.alloc_shared([kv_splits, merge_rows, HEAD_DIM], T.float32)
                if merge_prefetch
                else None
            )
            _merge_splits(
                part_o, part_ml, attn_sink, len_s, out, row_fac, recv_o, rid,
                gid, q0, split, part, heads_per_cta, rows, live_rows, merge_rows,
                kv_splits, scale_log2,
            )  # fmt: skip


def _cta_rows(grp, head_groups, qpc, q_groups, num_queries, heads_per_cta):
    """(head group, first query, rows that are not padding) of the CTA's
    group grp of a request; with one query group, Python constants."""
    if q_groups == 1:
        return grp, 0, qpc * heads_per_cta
    q0 = grp // head_groups * qpc
    return grp % head_groups, q0, T.min(num_queries - q0, qpc) * heads_per_cta


def _gather_slot(idx_s, pos, live_len):
    """Cache slot of index position pos for a gather (slot 0 past the live
    length or for a -1 entry; the live mask zeroes those)."""
    return T.if_then_else(pos < live_len, T.max(idx_s[pos], 0), 0)


# The split kernel's merge (kv_splits > 1). Defined after the kernels' first
# @tilelang_jit so that, without tilelang, importing this module fails with
# vLLM's own "tilelang is required" ImportError, not at a macro decorator.
def _max_over_splits(part_ml, part, m, kv_splits):
    top = part_ml[part, 0, m]
    for s in range(1, kv_splits):
        top = T.max(top, part_ml[part + s, 0, m])
    return top


def _sum_over_splits(part_ml, part, m, top, kv_splits, scale_log2):
    total = part_ml[part, 1, m] * T.exp2((part_ml[part, 0, m] - top) * scale_log2)
    for s in range(1, kv_splits):
        total += part_ml[part + s, 1, m] * T.exp2(
            (part_ml[part + s, 0, m] - top) * scale_log2
        )
    return total


def _weighted_sum(part_o, row_fac, part, m, i, d, kv_splits):
    total = part_o[part, m, d] * row_fac[i, 0]
    for s in range(1, kv_splits):
        total += part_o[part + s, m, d] * row_fac[i, s]
    return total


def _weighted_sum_prefetched(recv_o, row_fac, i, d, kv_splits):
    total = recv_o[0, i, d] * row_fac[i, 0]
    for s in range(1, kv_splits):
        total += recv_o[s, i, d] * row_fac[i, s]
    return total


def _sink_norm(attn_sink, live, h, top, l_sum, scale_log2):
    """1 / denominator of a merged row, the sink folded in around
    max(max, sink) as the unsplit kernel does; 0 for an empty row."""
    sink_log2 = attn_sink[h] * LOG2E
    m_log2 = top * scale_log2
    peak = T.max(m_log2, sink_log2)
    corr = T.exp2(m_log2 - peak)
    denom = l_sum * corr + T.exp2(sink_log2 - peak)
    return T.if_then_else(live & (l_sum > 0), corr / denom, 0.0)


@T.macro
def _merge_splits(
    part_o, part_ml, attn_sink, len_s, out, row_fac, recv_o, rid, gid, q0, split,
    part, heads_per_cta, rows, live_rows, merge_rows, kv_splits, scale_log2,
):  # fmt: skip
    """Rows split * merge_rows ... of the cluster's output from the
    kv_splits partial states: rescale each to the common max, fold the sink
    (as the unsplit kernel does) and write bf16. Two passes: a thread a row
    computes the row's factors from part_ml, then every thread weighs part_o
    with them (one barrier; all per element was slower, H200 run 23).
    recv_o (merge_prefetch): part_o's rows copied into it first, in flight
    during the factor pass."""
    r0 = split * merge_rows
    if recv_o is not None:
        T.async_copy(part_o[part : part + kv_splits, r0 : r0 + merge_rows, :], recv_o)
    for i in T.Parallel(merge_rows):
        m = T.min(r0 + i, rows - 1)
        top = _max_over_splits(part_ml, part, m, kv_splits)
        l_sum = _sum_over_splits(part_ml, part, m, top, kv_splits, scale_log2)
        h = gid * heads_per_cta + m % heads_per_cta
        norm = _sink_norm(attn_sink, len_s[m] > 0, h, top, l_sum, scale_log2)
        for s in range(kv_splits):
            row_fac[i, s] = T.exp2((part_ml[part + s, 0, m] - top) * scale_log2) * norm
    if recv_o is not None:
        T.ptx_wait_group(0)
        T.sync_threads()
        for i, d in T.Parallel(merge_rows, HEAD_DIM):
            if r0 + i < live_rows:
                out[
                    rid,
                    q0 + (r0 + i) // heads_per_cta,
                    gid * heads_per_cta + (r0 + i) % heads_per_cta,
                    d,
                ] = T.cast(
                    _weighted_sum_prefetched(recv_o, row_fac, i, d, kv_splits),
                    T.bfloat16,
                )
    else:
        for i, d in T.Parallel(merge_rows, HEAD_DIM):
            if r0 + i < live_rows:
                out[
                    rid,
                    q0 + (r0 + i) // heads_per_cta,
                    gid * heads_per_cta + (r0 + i) % heads_per_cta,
                    d,
                ] = T.cast(
                    _weighted_sum(part_o, row_fac, part, r0 + i, i, d, kv_splits),
                    T.bfloat16,
                )


class DSparkDraftAttnTileLangKernel(
    VllmTileLangJitKernel["DSparkDraftAttnTileLangKernel.CompileKey"]
):
    """Owner of the draft-attention kernel: compile keys and warm-up inputs."""

    @dataclass(frozen=True)
    class CompileKey:
        num_heads: int
        num_queries: int
        width: int
        block_size: int
        page_bytes: int
        scale: float
        heads_per_cta: int
        block_kv: int
        threads: int
        num_stages: int
        reduce_batch: int
        row_tile: int
        queries_per_cta: int
        kv_splits: int
        q_async: bool
        merge_prefetch: bool
        resident: bool
        passes: int
        resident_tiles: int
        tail_kv: int

    @staticmethod
    def kernel(compile_key: CompileKey) -> Any:
        if compile_key.resident:
            return dspark_draft_attn_resident_tilelang
        return dspark_draft_attn_tilelang

    def dispatch(  # type: ignore[override]
        self,
        *,
        num_heads: int,
        num_queries: int,
        width: int,
        block_size: int,
        page_bytes: int,
        scale: float,
        capability: tuple[int, int],
        tile: TileConfig | None = None,
    ) -> CompileKey:
        # tile: a given CTA shape instead of the arch's (the benchmark's sweep).
        # vLLM's warm-up traces this body: assignments and one return only.
        cfg = (
            tile
            if tile is not None
            else select_tile_config(num_heads, num_queries, capability)
        )
        return self.CompileKey(
            num_heads=num_heads,
            num_queries=num_queries,
            width=width,
            block_size=block_size,
            page_bytes=page_bytes,
            scale=scale,
            heads_per_cta=cfg.heads_per_cta,
            block_kv=cfg.block_kv,
            threads=cfg.threads,
            num_stages=cfg.num_stages,
            reduce_batch=cfg.reduce_batch,
            row_tile=cfg.row_tile,
            queries_per_cta=cta_queries(num_queries, cfg),
            kv_splits=cfg.kv_splits,
            q_async=cfg.q_async,
            merge_prefetch=cfg.merge_prefetch,
            resident=cfg.resident,
            passes=cfg.passes,
            resident_tiles=cfg.resident_tiles,
            tail_kv=cfg.tail_kv,
        )

    def get_warmup_keys(
        self,
        *,
        num_heads: int,
        num_queries: int,
        window_size: int,
        block_size: int,
        page_bytes: int,
        scale: float,
        capability: tuple[int, int],
    ) -> list[CompileKey]:
        # The unsplit key and, on SM90, the split ones small batches pick
        # (launch_tile: one CTA a KV tile, narrow tiles where they fit) and
        # the KV-resident one large batches pick where it can pay (more
        # than one pass a CTA: resident_pays).
        width = dspark_index_width(window_size, num_queries)
        live_slots = dspark_live_slots(window_size, num_queries)
        cfg = select_tile_config(num_heads, num_queries, capability)
        tiles = [cfg, *split_tiles(cfg, live_slots, capability, num_queries, num_heads)]
        if resident_kv(cfg, capability):
            resident = resident_tile(cfg, num_heads, num_queries)
            if resident_passes(resident, num_queries) > 1:
                tiles.append(resident)
        return [
            self.dispatch(
                num_heads=num_heads,
                num_queries=num_queries,
                width=width,
                block_size=block_size,
                page_bytes=page_bytes,
                scale=scale,
                capability=capability,
                tile=tile,
            )
            for tile in tiles
        ]

    def warmup_inputs(self, compile_key: CompileKey) -> dict[str, Any]:
        key = compile_key
        n_tok = key.num_queries
        page = key.page_bytes
        part_rows = scratch_rows(
            key.queries_per_cta,
            key.heads_per_cta,
            key.row_tile,
            key.kv_splits,
            key.merge_prefetch,
        )
        return dict(
            q=make_tilelang_warmup_tensor(
                torch.bfloat16, 1, key.num_queries, key.num_heads, HEAD_DIM
            ),
            kv_fp8=make_tilelang_warmup_tensor(torch.float8_e4m3fn, 1, page),
            kv_i64=make_tilelang_warmup_tensor(torch.int64, 1, page // 8),
            kv_bf16=make_tilelang_warmup_tensor(torch.bfloat16, 1, page // 2),
            indices=make_tilelang_warmup_tensor(torch.int32, 1, n_tok, key.width),
            lens=make_tilelang_warmup_tensor(torch.int32, 1, n_tok),
            attn_sink=make_tilelang_warmup_tensor(torch.float32, key.num_heads),
            out=make_tilelang_warmup_tensor(
                torch.bfloat16, 1, key.num_queries, key.num_heads, HEAD_DIM
            ),
            part_o=make_tilelang_warmup_tensor(torch.float32, 1, part_rows, HEAD_DIM),
            part_ml=make_tilelang_warmup_tensor(torch.float32, 1, 2, part_rows),
            compile_key=key,
        )

    # Compiled kernels by (JIT function's id, call signature): an eager launch
    # through TileLang's JIT re-derives its cache key from every argument
    # (tens of us of Python a call); reuse_compiled=False takes that path.
    _MAX_COMPILED = 4096

    def __init__(self) -> None:
        super().__init__()
        self.reuse_compiled = True
        self._compiled: dict[tuple[Any, ...], tuple[Any, tuple[int, ...]]] = {}

    def launch(
        self,
        jit_impl: Any,
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any] | None = None,
    ) -> Any:
        if self._warming_key is not None or kwargs or not self.reuse_compiled:
            return super().launch(jit_impl, args, kwargs)
        # Shapes, strides, dtypes and devices of the tensors and every scalar:
        # all TileLang keys on and more, so a hit is never a wrong kernel.
        signature = tuple(
            [
                (a.dtype, a.shape, a.stride(), a.device)
                if isinstance(a, torch.Tensor)
                else a
                for a in args
            ]
        )
        compiled = self._compiled
        # by id: TileLang's JIT functions are not hashable, and live as long
        # as their module
        hit = compiled.get((id(jit_impl), signature))
        if hit is not None:
            kernel, tensor_positions = hit
            return kernel(*(args[i] for i in tensor_positions))
        result = super().launch(jit_impl, args, kwargs)  # compiles if needed
        found = _compiled_kernel(jit_impl, args)
        if found is not None:
            if len(compiled) >= self._MAX_COMPILED:
                compiled.clear()
            compiled[(id(jit_impl), signature)] = found
        return result

    @kernel_launcher
    def __call__(
        self,
        q: Any,
        kv_fp8: Any,
        kv_i64: Any,
        kv_bf16: Any,
        indices: Any,
        lens: Any,
        attn_sink: Any,
        out: Any,
        part_o: Any,
        part_ml: Any,
        compile_key: CompileKey,
    ) -> TileLangLaunchSpec:
        key = compile_key
        tensors = (q, kv_fp8, kv_i64, kv_bf16, indices, lens, attn_sink, out)
        shape = (
            key.num_heads,
            key.num_queries,
            key.width,
            key.block_size,
            key.page_bytes,
            key.scale,
            key.heads_per_cta,
        )
        if key.resident:
            return (key,), (
                *tensors,
                *shape,
                key.queries_per_cta,
                key.passes,
                key.block_kv,
                key.resident_tiles,
                key.tail_kv,
                key.threads,
            )
        return (key,), (
            *tensors,
            part_o,
            part_ml,
            *shape,
            key.block_kv,
            key.threads,
            key.num_stages,
            key.reduce_batch,
            key.row_tile,
            key.kv_splits,
            key.q_async,
            key.merge_prefetch,
            key.queries_per_cta,
        )


_DSPARK_DRAFT_ATTN_TILELANG_KERNEL = DSparkDraftAttnTileLangKernel()


def _compiled_kernel(
    jit_impl: Any, args: tuple[Any, ...]
) -> tuple[Any, tuple[int, ...]] | None:
    """(the compiled kernel TileLang's JIT cached for args, the positions of
    the tensors it takes), or None where this TileLang does not expose them
    (its JIT internals, as compile_tilelang uses them) or they differ."""
    parse_args = getattr(getattr(jit_impl, "func", None), "parse_args", None)
    cache = getattr(jit_impl, "_kernel_cache", None)
    if not callable(parse_args) or not isinstance(cache, Mapping):
        return None
    key, tensor_args = parse_args(*args)
    kernel = cache.get(key)
    positions = tuple(i for i, a in enumerate(args) if isinstance(a, torch.Tensor))
    taken = list(tensor_args.values()) if isinstance(tensor_args, dict) else None
    if kernel is None or taken is None or len(taken) != len(positions):
        return None
    if any(t is not args[i] for t, i in zip(taken, positions)):
        return None
    return kernel, positions


@functools.lru_cache(maxsize=4096)
def _launch_plan(
    num_reqs: int,
    num_heads: int,
    num_queries: int,
    width: int,
    live_slots: int,
    block_size: int,
    page_bytes: int,
    scale: float,
    capability: tuple[int, int],
    sm_count: int,
    tile: TileConfig | None,
) -> tuple[
    TileConfig, TileConfig, DSparkDraftAttnTileLangKernel.CompileKey, tuple[int, int]
]:
    """(the launch's tile, the unsplit tile, the launch's compile key, its
    scratch shape: _split_scratch's parts and rows), memoised: choosing them is
    pure Python of ~100 us a call, more than the kernel itself at small
    batches when the launch is not in a CUDA graph."""
    unsplit = tile or select_tile_config(num_heads, num_queries, capability)
    if tile is None:
        tile = launch_tile(
            unsplit, num_reqs, num_heads, live_slots, sm_count, capability, num_queries
        )
    key = _DSPARK_DRAFT_ATTN_TILELANG_KERNEL.dispatch(
        num_heads=num_heads,
        num_queries=num_queries,
        width=width,
        block_size=block_size,
        page_bytes=page_bytes,
        scale=scale,
        capability=capability,
        tile=tile,
    )
    return tile, unsplit, key, scratch_shape(num_reqs, num_heads, num_queries, tile)


def page_views(
    swa_cache: torch.Tensor, page_bytes: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """e4m3 / int64 / bf16 views of the paged SWA cache, one row per page.

    The three views alias the same bytes; the kernel reads NoPE bytes as e4m3
    (so e4m3 zeros and subnormals convert exactly), a token's 8 scale bytes as
    one int64 word and RoPE values as bf16.
    """
    num_blocks = swa_cache.shape[0]
    if swa_cache.dtype != torch.uint8:
        swa_cache = swa_cache.view(torch.uint8)
    if swa_cache.stride(0) != page_bytes:
        raise ValueError(
            f"SWA cache page stride {swa_cache.stride(0)} != page_bytes {page_bytes}"
        )
    flat = torch.as_strided(swa_cache, (num_blocks, page_bytes), (page_bytes, 1))
    return (
        flat.view(torch.float8_e4m3fn),
        flat.view(torch.int64),
        flat.view(torch.bfloat16),
    )


# The page views of each live SWA cache tensor (by id, dropped when the tensor
# is): four tensor views are a few us of an eager launch's host time.
_PAGE_VIEWS: dict[int, tuple[Any, tuple[Any, ...], tuple[torch.Tensor, ...]]] = {}


def _cached_page_views(
    swa_cache: torch.Tensor, page_bytes: int
) -> tuple[torch.Tensor, ...]:
    """page_views of swa_cache, reused while the same tensor object has the
    same memory and layout (one re-pointed with set_ gets new views)."""
    key = id(swa_cache)
    layout = (
        swa_cache.data_ptr(),
        swa_cache.shape[0],
        swa_cache.stride(0),
        swa_cache.dtype,
        page_bytes,
    )
    hit = _PAGE_VIEWS.get(key)
    if hit is not None and hit[0]() is swa_cache and hit[1] == layout:
        return hit[2]
    views = page_views(swa_cache, page_bytes)
    ref = weakref.ref(swa_cache, lambda _, key=key: _PAGE_VIEWS.pop(key, None))
    _PAGE_VIEWS[key] = (ref, layout, views)
    return views


# Per device: fp32 scratch for the partial states of split launches (every
# launch of the device's stream reuses it, as they run one after another).
_SPLIT_SCRATCH: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}
# Views of it by (device, parts, rows a part), with the scratch they view.
_SCRATCH_VIEWS: dict[tuple[torch.device, int, int], tuple[torch.Tensor, tuple]] = {}


@functools.cache
def _sm_count(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


@functools.cache
def _device_capability(device: torch.device) -> tuple[int, int]:
    return torch.cuda.get_device_capability(device)


@functools.cache
def _unsplit_placeholder(
    device: torch.device, m_pad: int
) -> tuple[torch.Tensor, torch.Tensor]:
    return (
        torch.empty(1, m_pad, HEAD_DIM, dtype=torch.float32, device=device),
        torch.empty(1, 2, m_pad, dtype=torch.float32, device=device),
    )


def _split_scratch(
    device: torch.device, parts: int, part_rows: int
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """part_o [parts, part_rows, 512] and part_ml [parts, 2, part_rows] views of the
    device's scratch, allocated on the first split launch (vLLM's eager
    warm-up runs before any capture); None when it would have to grow inside
    a graph capture. An unsplit launch never touches it: parts == 1 gets a
    one-part placeholder, so archs and batches that never split (SM12x, large
    R) never allocate the scratch. The views are kept per shape until the
    scratch grows (slicing and viewing it was ~5 us of an eager launch)."""
    if parts == 1:
        return _unsplit_placeholder(device, part_rows)
    o, ml = _SPLIT_SCRATCH.get(device, (None, None))
    hit = _SCRATCH_VIEWS.get((device, parts, part_rows))
    if hit is not None and hit[0] is o:
        return hit[1]
    if o is None or ml is None or o.numel() < parts * part_rows * HEAD_DIM:
        if torch.cuda.is_current_stream_capturing():
            return None
        # launch_tile keeps a split launch's parts <= the SM count
        rows = max(parts, _sm_count(device)) * part_rows
        o = torch.empty(rows * HEAD_DIM, dtype=torch.float32, device=device)
        ml = torch.empty(2 * rows, dtype=torch.float32, device=device)
        _SPLIT_SCRATCH[device] = (o, ml)
        # views of the old scratch would keep it alive
        for stale in [k for k in _SCRATCH_VIEWS if k[0] == device]:
            del _SCRATCH_VIEWS[stale]
    views = (
        o[: parts * part_rows * HEAD_DIM].view(parts, part_rows, HEAD_DIM),
        ml[: parts * 2 * part_rows].view(parts, 2, part_rows),
    )
    _SCRATCH_VIEWS[(device, parts, part_rows)] = (o, views)
    return views


def scratch_shape(
    num_reqs: int, num_heads: int, num_queries: int, tile: TileConfig
) -> tuple[int, int]:
    """(parts, rows a part) of a launch's scratch: its CTAs for a split tile,
    else 1 (the placeholder)."""
    parts = launch_ctas(tile, num_reqs, num_heads, num_queries)
    return (
        parts if tile.kv_splits > 1 else 1,
        scratch_rows(
            cta_queries(num_queries, tile),
            tile.heads_per_cta,
            tile.row_tile,
            tile.kv_splits,
            tile.merge_prefetch,
        ),
    )


def launch_scratch(
    device: torch.device,
    num_reqs: int,
    num_heads: int,
    num_queries: int,
    tile: TileConfig,
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The part_o / part_ml arguments of one launch (_split_scratch)."""
    return _split_scratch(
        device, *scratch_shape(num_reqs, num_heads, num_queries, tile)
    )


def clear_launch_caches() -> None:
    """Forget the wrapper's host-side caches (launch plans, page and scratch
    views): the uncached path, for benchmarks."""
    _launch_plan.cache_clear()
    _PAGE_VIEWS.clear()
    _SCRATCH_VIEWS.clear()


def dspark_draft_attention(
    q: torch.Tensor,
    swa_cache: torch.Tensor,
    indices: torch.Tensor,
    lens: torch.Tensor,
    attn_sink: torch.Tensor,
    out: torch.Tensor,
    *,
    num_queries: int,
    scale: float,
    block_size: int,
    page_bytes: int,
    capability: tuple[int, int] | None = None,
    tile: TileConfig | None = None,
    live_slots: int | None = None,
) -> torch.Tensor:
    """Draft attention into ``out`` in place (CUDA-graph capturable).

    q, out: [T, H, 512] bf16 with T = num_reqs * num_queries (request r owns
    rows r * num_queries ... + num_queries - 1, as the DSpark draft lays them
    out); swa_cache: [num_blocks, ...] paged fp8_ds_mla bytes with page stride
    ``page_bytes``; indices: [T, 1, width] or [T, width] int32 global slots,
    -1 padded; lens: [T] int32; attn_sink: [H] fp32. tile: a CTA shape instead
    of select_tile_config's and launch_tile's (benchmarks and checks).
    live_slots: the most lens can be (DSpark rows: dspark_live_slots, window
    + N), which sizes small batches' KV splits; None: the width. Larger lens
    are still right (a split CTA then takes several tiles), only slower.
    """
    num_tokens, num_heads, head_dim = q.shape
    if head_dim != HEAD_DIM:
        raise ValueError(f"head_dim must be {HEAD_DIM}, got {head_dim}")
    if num_tokens % num_queries != 0:
        raise ValueError(
            f"{num_tokens} tokens are not whole requests of {num_queries} queries"
        )
    if capability is None:
        capability = _device_capability(q.device)
    width = indices.shape[-1]
    if live_slots is not None and not 0 < live_slots <= width:
        raise ValueError(
            f"live_slots must be in 1..{width} (the index width), got {live_slots}"
        )
    num_reqs = num_tokens // num_queries
    if num_reqs == 0:
        return out
    plan = (num_heads, num_queries, width, live_slots or width, block_size)
    plan += (page_bytes, float(scale))
    plan += (tuple(capability), _sm_count(q.device))
    tile, unsplit, key, shape = _launch_plan(num_reqs, *plan, tile)
    scratch = _split_scratch(q.device, *shape)
    if scratch is None:  # first split launch inside a capture: do not split
        tile, _, key, shape = _launch_plan(
            num_reqs, *plan, replace(unsplit, kv_splits=1)
        )
        scratch = _split_scratch(q.device, *shape)
        assert scratch is not None
    kv_fp8, kv_i64, kv_bf16 = _cached_page_views(swa_cache, page_bytes)
    _DSPARK_DRAFT_ATTN_TILELANG_KERNEL(
        q=q.view(num_reqs, num_queries, num_heads, HEAD_DIM),
        kv_fp8=kv_fp8,
        kv_i64=kv_i64,
        kv_bf16=kv_bf16,
        indices=indices.view(num_reqs, num_queries, width),
        lens=lens.view(num_reqs, num_queries),
        attn_sink=attn_sink,
        out=out.view(num_reqs, num_queries, num_heads, HEAD_DIM),
        part_o=scratch[0],
        part_ml=scratch[1],
        compile_key=key,
    )
    return out
