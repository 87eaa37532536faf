# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""KV-resident TileLang draft attention for large DSpark batches (SM90).

The streaming kernel (dspark_draft_attn_tilelang) gathers and dequantises
every KV tile once per CTA, and a request needs several CTAs (64 heads x 1
query each at 64 heads: 5 at N = 5), so a request's window is gathered and
dequantised 5 times, each time as a chain of tile gathers one CTA per SM
waits on. Here one CTA takes a request's head group and loops over its
query groups ("passes", each one 64-row wgmma tile of (query, head) rows):

1. gather the request's live slots once, every byte of the window in flight
   together by cp.async (the raw bytes staged in the tiles' own NoPE columns),
   then dequantised in shared memory, while the first pass's Q arrives the
   same way (gather="async"; "registers": the gather of runs 36-58, whose
   loads nvcc serialised, kept for A/B; the benchmark README's runs 58-61).
   gather="bulk" (NOT YET RUN ON A GPU, off): each slot's 576-byte record by
   one bulk copy (cp.async.bulk, the copy engine), staged in the Q buffer and
   the first resident tile, dequantised shared to shared, then Q;
2. per pass: S = Q K^T, online softmax and O += P V over the resident
   tiles, the sink folded in, O written through the (then free) Q buffer.

Shared memory: resident_tiles x block_kv + tail_kv bf16 rows of 512 (2 x 64
+ 16 = 144 >= 128 + N for DSV4's window) + Q (64 x 512) + P, 226 KB of SM90's
227 KB. The 64-token tiles keep each GEMM at wgmma n = 32 a warpgroup (TileLang
takes n = gcd(columns a warpgroup, 256): 48-token tiles gave n = 8, three
times the instructions). A row with more live slots than that (indices wider
than the window) is still correct: its slots are dequantised chunk by chunk,
a slot at a time, in every pass (slow, never the DSpark case).
"""

from __future__ import annotations

from vllm.models.deepseek_v4.nvidia.ops.dspark_draft_attn_common import (
    _NEG_LARGE,
    HEAD_DIM,
    LOG2E,
    NOPE_DIM,
    QUANT_BLOCK,
    ROPE_DIM,
    SCALE_BYTES_PER_TOKEN,
    TOKEN_DATA_BYTES,
    padded_rows,
    query_groups,
)
from vllm.tilelang_utils import T, tilelang_jit

# fp32 bit pattern of 2^(e - 127) is e << 23 for a UE8M0 byte e >= 1; byte 0
# is the fp32 subnormal 2^-127, kept exact as the reference has it.
_TWO_POW_M127 = 2.0**-127
# Resident tiles whose raw bytes are in registers at once: the first 64-token
# tile, then the rest (the second and the tail). Two full tiles at once
# spilled on sm_90a (232-868 B with ptxas, tilelang 0.1.12); one does not.
GATHER_GROUP = 1
# gather="bulk": one bulk copy (the copy engine, no per-thread address math) a
# slot's 576-byte record, staged in q_s and kv_s[0] (the records that do not
# fit in q_s), then each 16 bytes of a resident row dequantised from its
# record. TileLang has no variable-size bulk copy or e4m3x2 conversion to call.
# The source spells the fp8_ds_mla record's sizes out:
assert (TOKEN_DATA_BYTES, NOPE_DIM, QUANT_BLOCK) == (576, 448, 64)
_BULK_SOURCE = r"""
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

// Where slot j's record is staged: q_s holds the first in_q, kv_s[0] the rest.
__device__ __forceinline__ unsigned char *dspark_staged(void *q_s, void *kv_s0,
                                                        int j, int in_q) {
  return j < in_q ? static_cast<unsigned char *>(q_s) + j * 576
                  : static_cast<unsigned char *>(kv_s0) + (j - in_q) * 576;
}

template <typename Bar>
__device__ __forceinline__ void dspark_bulk_record(void *q_s, void *kv_s0,
                                                   int in_q, int j,
                                                   const void *record,
                                                   Bar &bar) {
  unsigned dst = static_cast<unsigned>(
      __cvta_generic_to_shared(dspark_staged(q_s, kv_s0, j, in_q)));
  unsigned mbar = static_cast<unsigned>(__cvta_generic_to_shared(&bar));
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes "
      "[%0], [%1], 576, [%2];\n" ::"r"(dst), "l"(record), "r"(mbar)
      : "memory");
}

// 16 bytes of slot j's resident row: chunk c < 56 holds NoPE values 8c ...
// 8c + 7 (e4m3 times the UE8M0 scale of their 64-value block, as bf16), the
// rest RoPE values 8 (c - 56) ... (bf16, copied); zeros for a dead slot.
__device__ __forceinline__ void dspark_dequant16(void *dst, void *q_s,
                                                 void *kv_s0, int in_q, int j,
                                                 int c, long long scale_word,
                                                 bool live) {
  uint4 v = make_uint4(0u, 0u, 0u, 0u);
  if (live) {
    const unsigned char *rec = dspark_staged(q_s, kv_s0, j, in_q);
    if (c < 56) {
      unsigned e = static_cast<unsigned>(scale_word >> (8 * (c >> 3))) & 255u;
      // 2^(e - 127); byte 0 is the fp32 subnormal 2^-127
      float scale = e ? __uint_as_float(e << 23) : __uint_as_float(1u << 22);
      uint2 raw = *reinterpret_cast<const uint2 *>(rec + 8 * c);
      unsigned pairs[4] = {raw.x & 0xffffu, raw.x >> 16, raw.y & 0xffffu,
                           raw.y >> 16};
      unsigned out[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        __half2 h(__nv_cvt_fp8x2_to_halfraw2(
            static_cast<__nv_fp8x2_storage_t>(pairs[k]), __NV_E4M3));
        float2 f = __half22float2(h);
        __nv_bfloat162 b = __floats2bfloat162_rn(f.x * scale, f.y * scale);
        out[k] = *reinterpret_cast<unsigned *>(&b);
      }
      v = make_uint4(out[0], out[1], out[2], out[3]);
    } else {
      v = *reinterpret_cast<const uint4 *>(rec + 448 + 16 * (c - 56));
    }
  }
  *reinterpret_cast<uint4 *>(dst) = v;
}
"""


@tilelang_jit
def dspark_draft_attn_resident_tilelang(
    q,
    kv_fp8,
    kv_i64,
    kv_bf16,
    indices,
    lens,
    attn_sink,
    out,
    num_heads: int,
    num_queries: int,
    width: int,
    block_size: int,
    page_bytes: int,
    scale: float,
    heads_per_cta: int = 64,
    queries_per_cta: int = 1,
    passes: int = 0,
    block_kv: int = 64,
    resident_tiles: int = 2,
    tail_kv: int = 16,
    threads: int = 256,
    gather: str = "async",
):
    """out[r, n, h] = softmax([scale * q[r, n, h] . K_s for live s] ++ sink[h]) V,
    K = V = the request's dequantised fp8_ds_mla rows (the streaming kernel's
    math); rows with lens == 0 are zeros.

    A CTA: one (request, head group) and `passes` consecutive query groups of
    queries_per_cta queries (0 = all of the request's groups), the request's
    KV dequantised into shared memory once for all of them.
    """
    num_reqs = T.dynamic("num_reqs")
    num_blocks = T.dynamic("num_blocks")
    assert gather in ("async", "registers", "bulk"), gather
    qpc, q_groups = query_groups(num_queries, queries_per_cta)
    n_pass = min(passes or q_groups, q_groups)
    cta_groups = -(-q_groups // n_pass)
    head_groups = num_heads // heads_per_cta
    rows = qpc * heads_per_cta
    m_pad = padded_rows(qpc, heads_per_cta, 64)
    full = block_kv * resident_tiles
    cap = full + tail_kv
    assert tail_kv > 0, "the tile list ends with the tail tile"
    scale_log2 = scale * LOG2E
    scale_off = block_size * TOKEN_DATA_BYTES
    assert page_bytes % 8 == 0 and scale_off % 8 == 0
    tok_words = TOKEN_DATA_BYTES // 2

    q: T.Tensor[[num_reqs, num_queries, num_heads, HEAD_DIM], T.bfloat16]  # type: ignore[no-redef,valid-type]
    kv_fp8: T.Tensor[[num_blocks, page_bytes], T.float8_e4m3fn]  # type: ignore[no-redef,valid-type]
    kv_i64: T.Tensor[[num_blocks, page_bytes // 8], T.int64]  # type: ignore[no-redef,valid-type]
    kv_bf16: T.Tensor[[num_blocks, page_bytes // 2], T.bfloat16]  # type: ignore[no-redef,valid-type]
    indices: T.Tensor[[num_reqs, num_queries, width], T.int32]  # type: ignore[no-redef,valid-type]
    lens: T.Tensor[[num_reqs, num_queries], T.int32]  # type: ignore[no-redef,valid-type]
    attn_sink: T.Tensor[[num_heads], T.float32]  # type: ignore[no-redef,valid-type]
    out: T.Tensor[[num_reqs, num_queries, num_heads, HEAD_DIM], T.bfloat16]  # type: ignore[no-redef,valid-type]

    with T.Kernel(head_groups * cta_groups, num_reqs, threads=threads) as (bx, rid):
        # head groups of a request adjacent in launch order (their KV shares L2)
        gid = bx % head_groups
        first_group = bx // head_groups * n_pass
        q_s = T.alloc_shared([m_pad, HEAD_DIM], T.bfloat16)
        # the resident tiles (a GEMM takes one: kv_s[t, :, :]) and the tail
        kv_s = T.alloc_shared([resident_tiles, block_kv, HEAD_DIM], T.bfloat16)
        kv_tail = T.alloc_shared([1, tail_kv, HEAD_DIM], T.bfloat16)
        p_s = T.alloc_shared([m_pad, block_kv], T.bfloat16)
        p_tail = T.alloc_shared([m_pad, tail_kv], T.bfloat16)
        # A chunk's cache slots (-1: dead) and UE8M0 scales, read once. Static
        # shared memory: TileLang's barrier planner treats the dynamic buffers
        # as one, so reading these while writing the tiles would put a CTA
        # barrier in every iteration of the dequantisation loops.
        slot_s = T.alloc_shared([cap], T.int32, scope="shared")
        scale_s = T.alloc_shared(
            [cap, SCALE_BYTES_PER_TOKEN], T.bfloat16, scope="shared"
        )
        len_s = T.alloc_shared([m_pad], T.int32)
        # the chunk's scale words (_gather_async, _gather_bulk)
        word_s = T.alloc_shared([cap], T.int64, scope="shared")
        if gather == "bulk":
            T.import_source(_BULK_SOURCE)
            # every slot's thread arrives, with its bulk copy's bytes
            window_bar = T.alloc_barrier(cap)

        acc_s = T.alloc_fragment([m_pad, block_kv], T.float32)
        acc_t = T.alloc_fragment([m_pad, tail_kv], T.float32)
        acc_o = T.alloc_fragment([m_pad, HEAD_DIM], T.float32)
        m_i = T.alloc_fragment([m_pad], T.float32)
        m_prev = T.alloc_fragment([m_pad], T.float32)
        l_i = T.alloc_fragment([m_pad], T.float32)
        l_tile = T.alloc_fragment([m_pad], T.float32)
        alpha = T.alloc_fragment([m_pad], T.float32)

        # All N rows of a request carry the same list; use the longest.
        max_len = T.alloc_var(T.int32, init=0)
        src_row = T.alloc_var(T.int32, init=0)
        for n in T.serial(num_queries):
            if lens[rid, n] > max_len:
                max_len = lens[rid, n]
                src_row = n
        live_len = T.min(max_len, width)
        num_chunks = T.ceildiv(live_len, cap)

        # The first pass's Q in flight while the first chunk is gathered
        # (before the accumulator is live: the gathers' registers are free);
        # the bulk gather stages the raw window in q_s and loads Q after it.
        if gather != "bulk":
            _issue_q(
                q, q_s, rid, first_group * qpc, gid, heads_per_cta, qpc, num_queries
            )
        _chunk_slots(indices, slot_s, rid, src_row, 0, live_len, width)
        if gather == "bulk":
            _gather_bulk(
                kv_i64, q_s, kv_s, kv_tail, word_s, slot_s, window_bar, block_size,
                page_bytes, scale_off,
            )  # fmt: skip
            _issue_q(
                q, q_s, rid, first_group * qpc, gid, heads_per_cta, qpc, num_queries
            )
        elif gather == "async":
            _gather_async(
                kv_bf16, kv_i64, kv_s, kv_tail, word_s, slot_s, scale_s,
                block_size, tok_words, scale_off,
            )  # fmt: skip
        else:
            _chunk_scales(kv_i64, slot_s, scale_s, block_size, scale_off)
            _gather_resident(
                kv_fp8, kv_bf16, kv_s, kv_tail, slot_s, scale_s, block_size, tok_words
            )
        for p in T.serial(n_pass):
            grp = first_group + p
            if grp < q_groups:
                q0 = grp * qpc
                live_rows = T.min(num_queries - q0, qpc) * heads_per_cta
                if p > 0:
                    # the previous pass's output left through q_s
                    T.sync_threads()
                    _issue_q(q, q_s, rid, q0, gid, heads_per_cta, qpc, num_queries)
                if live_rows < m_pad:
                    for m, d in T.Parallel(m_pad, HEAD_DIM):
                        if m >= live_rows:
                            q_s[m, d] = T.cast(0, T.bfloat16)
                for m in T.Parallel(m_pad):
                    len_s[m] = T.if_then_else(
                        m < live_rows,
                        lens[rid, T.min(q0 + m // heads_per_cta, num_queries - 1)],
                        0,
                    )
                T.fill(m_i, _NEG_LARGE)
                T.fill(l_i, 0)
                T.fill(acc_o, 0)
                for c in T.serial(num_chunks):
                    # A row wider than the resident tiles (never DSpark's)
                    # is dequantised again chunk by chunk in every pass.
                    if (c > 0) | ((p > 0) & (num_chunks > 1)):
                        T.sync_threads()
                        _chunk_slots(
                            indices, slot_s, rid, src_row, c * cap, live_len, width
                        )
                        _chunk_scales(kv_i64, slot_s, scale_s, block_size, scale_off)
                        # a slot at a time: few registers beside the
                        # accumulator (this path is not the fast one)
                        for j in T.serial(cap):
                            _dequant_slot(
                                kv_fp8, kv_bf16, kv_s, kv_tail, j, slot_s, scale_s,
                                block_size, tok_words,
                            )  # fmt: skip
                    T.ptx_wait_group(0)
                    T.sync_threads()
                    for t in T.serial(resident_tiles):
                        if c * cap + t * block_kv < live_len:
                            _attend_tile(
                                q_s, kv_s, t, t * block_kv, p_s, slot_s, len_s, acc_s,
                                acc_o, m_i, m_prev, l_i, l_tile, alpha, c * cap,
                                scale_log2,
                            )  # fmt: skip
                    if c * cap + full < live_len:
                        _attend_tile(
                            q_s, kv_tail, 0, full, p_tail, slot_s, len_s, acc_t,
                            acc_o, m_i, m_prev, l_i, l_tile, alpha, c * cap,
                            scale_log2,
                        )  # fmt: skip
                # Q's copies are waited on in the chunk loop, which an empty
                # row skips; q_s is written below
                T.ptx_wait_group(0)
                T.sync_threads()
                # the sink, computed around max(m, sink) (no overflow for a
                # large or -inf sink); rows with no live slot give zeros
                for m in T.Parallel(m_pad):
                    sink_log2 = (
                        attn_sink[gid * heads_per_cta + m % heads_per_cta] * LOG2E
                    )
                    m_log2 = m_i[m] * scale_log2
                    top = T.max(m_log2, sink_log2)
                    corr = T.exp2(m_log2 - top)
                    denom = l_i[m] * corr + T.exp2(sink_log2 - top)
                    alpha[m] = T.if_then_else(
                        (len_s[m] > 0) & (l_i[m] > 0), corr / denom, 0.0
                    )
                # through q_s (free until the next pass) for 16-byte stores
                for m, d in T.Parallel(m_pad, HEAD_DIM):
                    q_s[m, d] = T.cast(acc_o[m, d] * alpha[m], T.bfloat16)
                for m, d in T.Parallel(rows, HEAD_DIM):
                    if m < live_rows:
                        out[
                            rid,
                            q0 + m // heads_per_cta,
                            gid * heads_per_cta + m % heads_per_cta,
                            d,
                        ] = q_s[m, d]


# Helpers after the kernel's @tilelang_jit: without tilelang, importing this
# module fails with vLLM's own "tilelang is required" ImportError. Plain
# functions loop over tiles in Python (TileLang's parser turns a `for` in a
# kernel or macro body into a loop of the kernel).
def _gather_resident(kv_fp8, kv_bf16, kv_s, kv_tail, slot_s, scale_s, block_size,
                     tok_words):  # fmt: skip
    """The chunk's slots into the resident tiles: every tile's raw bytes
    loaded into registers first, then dequantised into shared memory (two
    DRAM round trips: GATHER_GROUP). A loop that loads and stores shared
    memory in turn runs one round trip at a time (the compiler cannot move a
    slot read above a shared store it may alias: ~45 us for 144 slots, H100
    run 35)."""
    tiles = [(kv_s, t, t * int(kv_s.shape[1])) for t in range(int(kv_s.shape[0]))]
    tiles.append((kv_tail, 0, int(kv_s.shape[0]) * int(kv_s.shape[1])))
    for group in (tiles[:GATHER_GROUP], tiles[GATHER_GROUP:]):
        raw = []
        for dst, _, j0 in group:
            rows = int(dst.shape[1])
            nope = T.alloc_fragment([rows, NOPE_DIM], T.float8_e4m3fn)
            rope = T.alloc_fragment([rows, ROPE_DIM], T.bfloat16)
            _load_raw(kv_fp8, kv_bf16, nope, rope, slot_s, j0, block_size, tok_words)
            raw.append((nope, rope))
        for (dst, t, j0), (nope, rope) in zip(group, raw):
            _store_dequantised(dst, t, nope, rope, slot_s, scale_s, j0)


@T.macro
def _issue_q(q, q_s, rid, q0, gid, heads_per_cta, qpc, num_queries):
    """The pass's Q rows by cp.async (waited on before the first GEMM)."""
    for qi in T.serial(qpc):
        if q0 + qi < num_queries:
            T.async_copy(
                q[rid, q0 + qi, gid * heads_per_cta : (gid + 1) * heads_per_cta, :],
                q_s[qi * heads_per_cta : (qi + 1) * heads_per_cta, :],
            )


@T.macro
def _chunk_slots(indices, slot_s, rid, src_row, pos0, live_len, width):
    """The chunk's cache slots (-1 past the live length or for a -1 entry)."""
    cap = slot_s.shape[0]
    for j in T.Parallel(cap):
        pos = pos0 + j
        slot_s[j] = T.if_then_else(
            pos < live_len, indices[rid, src_row, T.min(pos, width - 1)], -1
        )


@T.macro
def _chunk_scales(kv_i64, slot_s, scale_s, block_size, scale_off):
    """Each chunk slot's scales as bf16 (powers of two: exact)."""
    for j, c in T.Parallel(slot_s.shape[0], SCALE_BYTES_PER_TOKEN):
        slot = T.max(slot_s[j], 0)
        word = _scale_word(kv_i64, slot, block_size, scale_off)
        scale_s[j, c] = _scale_of(word, c)


def _scale_of(word, c):
    """Scale byte c of a token's scale word as bf16: UE8M0, 2^(byte - 127)."""
    byte = T.cast((word >> (8 * c)) & 255, T.int32)
    return T.cast(
        T.if_then_else(
            byte > 0, T.reinterpret(byte << 23, T.float32), T.float32(_TWO_POW_M127)
        ),
        T.bfloat16,
    )


# cp.async without TileLang's commit and wait after each loop: one wait for
# all of the gather's copies
_NO_WAIT = {"parallel_async_without_async_commit_wait": True}


@T.macro
def _gather_async(
    kv_bf16, kv_i64, kv_s, kv_tail, word_s, slot_s, scale_s, block_size,
    tok_words, scale_off,
):  # fmt: skip
    """The chunk's slots into the resident tiles in one DRAM round trip: all
    of the window's raw e4m3 bytes, RoPE values and scale words in flight
    together by cp.async, then dequantised shared to shared. (Loads into
    registers do not stay in flight together: nvcc moves each read-only load
    down to its use, past the barriers.)

    No shared memory is free for the raw bytes, so they wait in the NoPE
    columns of the tiles they end up in: raw rows 2i and 2i + 1 (448 bytes
    each, as bf16 pairs) in row i of the last resident tile, the tail's in the
    tail. The RoPE columns take their values directly. The last tile and the
    tail are then read into registers before they are overwritten.

    Straight-line code (~90 KB on sm_90a), fetched once a CTA. The same
    gather in rolled loops fetched less code but was 5-16 % slower (H100 run
    61): expanding the staged bytes in place took 18 rounds of two CTA
    barriers, and TileLang's barrier planner puts two in every iteration of
    a rolled loop that reads and writes the tiles, even where the rows read
    and written are disjoint (codegen)."""
    n_tiles, rows = kv_s.shape[0], kv_s.shape[1]
    full = n_tiles * rows
    tail = kv_tail.shape[1]
    last = n_tiles - 1
    half = NOPE_DIM // 2
    for i, e in T.Parallel(
        full // 2, NOPE_DIM, prefer_async=True, annotations=_NO_WAIT
    ):
        kv_s[last, i, e] = _raw_pair(
            kv_bf16, slot_s, 2 * i + e // half, e % half, block_size, tok_words
        )
    for i, e in T.Parallel(
        tail // 2, NOPE_DIM, prefer_async=True, annotations=_NO_WAIT
    ):
        kv_tail[0, i, e] = _raw_pair(
            kv_bf16, slot_s, full + 2 * i + e // half, e % half, block_size, tok_words
        )
    _land_rope_and_scales(
        kv_bf16, kv_i64, kv_s, kv_tail, word_s, slot_s, scale_s, block_size,
        tok_words, scale_off,
    )  # fmt: skip
    # All staged bytes into registers (63 a thread), one barrier, then the
    # tiles in place: reads and writes of the tiles in one loop would put a
    # barrier in every iteration.
    pairs = T.alloc_fragment([full, half], T.bfloat16)
    tail_pairs = T.alloc_fragment([tail, half], T.bfloat16)
    for r, k in T.Parallel(full, half):
        pairs[r, k] = kv_s[last, r // 2, r % 2 * half + k]
    for j, k in T.Parallel(tail, half):
        tail_pairs[j, k] = kv_tail[0, j // 2, j % 2 * half + k]
    T.sync_threads()
    for t, j, k in T.Parallel(n_tiles, rows, half):
        for b in T.unroll(2):
            kv_s[t, j, 2 * k + b] = _dequantised(
                pairs[t * rows + j, k], b, slot_s, scale_s, t * rows + j, k
            )
    for j, k in T.Parallel(tail, half):
        for b in T.unroll(2):
            kv_tail[0, j, 2 * k + b] = _dequantised(
                tail_pairs[j, k], b, slot_s, scale_s, full + j, k
            )
    _zero_dead_rope(kv_s, kv_tail, slot_s)


def _gather_bulk(
    kv_i64, q_s, kv_s, kv_tail, word_s, slot_s, bar, block_size, page_bytes,
    scale_off,
):  # fmt: skip
    """The chunk's slots into the resident tiles (gather="bulk"): each live
    slot's 576-byte record by one bulk copy (the copy engine does the address
    work the cp.async gather spends ~90 KB of code on), staged in q_s (the
    first in_q records) and kv_s[0] (the rest), the scale words by cp.async,
    one wait; then each resident row's 16-byte chunks dequantised from the
    records: tile 1 and the tail first, kv_s[0] (whose staged records are
    read by then) last. Q is loaded after this (q_s holds records until
    then)."""
    n_tiles, rows = int(kv_s.shape[0]), int(kv_s.shape[1])
    full = n_tiles * rows
    in_q = int(q_s.shape[0]) * int(q_s.shape[1]) * 2 // TOKEN_DATA_BYTES
    # kv_s[0]'s own rows are all staged in q_s, the rest fit in kv_s[0]
    assert n_tiles == 2 and in_q >= rows, (n_tiles, in_q)
    cap = full + int(kv_tail.shape[1])
    assert (cap - in_q) * TOKEN_DATA_BYTES <= rows * HEAD_DIM * 2
    assert page_bytes % 16 == 0, "bulk copies want 16-byte aligned records"
    _issue_bulk(kv_i64, q_s, kv_s, word_s, slot_s, bar, block_size, scale_off, in_q)
    _dequant_staged(kv_s, 1, rows, q_s, kv_s, word_s, slot_s, in_q)
    _dequant_staged(kv_tail, 0, full, q_s, kv_s, word_s, slot_s, in_q)
    T.sync_threads()
    _dequant_staged(kv_s, 0, 0, q_s, kv_s, word_s, slot_s, in_q)
    T.sync_threads()


@T.macro
def _issue_bulk(kv_i64, q_s, kv_s, word_s, slot_s, bar, block_size, scale_off, in_q):
    """Every live slot's record by a bulk copy (its thread arrives with the
    bytes; a dead slot's thread arrives with none) and the scale words by
    cp.async; then one wait for both."""
    cap = slot_s.shape[0]
    T.sync_threads()
    tx = T.get_thread_binding()
    if tx < cap:
        slot = slot_s[tx]
        # TileLang 0.1.15 guards the copy with the cache's page count (on an
        # empty cache its page is out of bounds): the bytes are expected under
        # the same test, as bytes that never come would hang the wait below.
        if slot >= 0 and kv_i64.shape[0] > 0:
            T.mbarrier_arrive_expect_tx(bar[0], TOKEN_DATA_BYTES)
            T.call_extern(
                "handle", "dspark_bulk_record", T.address_of(q_s[0, 0]),
                T.address_of(kv_s[0, 0, 0]), in_q, tx,
                T.address_of(kv_i64[
                    _page(kv_i64, slot, block_size),
                    (slot % block_size) * (TOKEN_DATA_BYTES // 8),
                ]),
                bar[0],
            )  # fmt: skip
        else:
            T.mbarrier_arrive(bar[0])
    for j in T.Parallel(cap, prefer_async=True, annotations=_NO_WAIT):
        slot = T.max(slot_s[j], 0)
        word_s[j] = _scale_word(kv_i64, slot, block_size, scale_off)
    T.ptx_commit_group()
    T.ptx_wait_group(0)
    T.mbarrier_wait_parity(bar[0], 0)
    T.sync_threads()


@T.macro
def _dequant_staged(dst, t, j0, q_s, kv_s, word_s, slot_s, in_q):
    """dst[t] (chunk slots j0 ...) from the staged records, a thread a
    16-byte chunk at a time (64 a row)."""
    n = dst.shape[1]
    threads = 256  # the KV-resident kernel's (its tile rule)
    tx = T.get_thread_binding()
    for i in T.unroll(-(-n * 64 // threads)):
        job = i * threads + tx
        if job < n * 64:
            r = job // 64
            c = job % 64
            T.call_extern(
                "handle", "dspark_dequant16", T.address_of(dst[t, r, c * 8]),
                T.address_of(q_s[0, 0]), T.address_of(kv_s[0, 0, 0]), in_q,
                j0 + r, c, word_s[j0 + r], slot_s[j0 + r] >= 0,
            )  # fmt: skip


@T.macro
def _land_rope_and_scales(
    kv_bf16, kv_i64, kv_s, kv_tail, word_s, slot_s, scale_s, block_size,
    tok_words, scale_off,
):  # fmt: skip
    """The cp.async gather's second half: the RoPE values straight into the
    tiles and the scale words, both in flight with the raw bytes the caller
    issued; then one wait for all of them and the scales as bf16."""
    n_tiles, rows = kv_s.shape[0], kv_s.shape[1]
    full = n_tiles * rows
    tail = kv_tail.shape[1]
    for t, j, d in T.Parallel(
        n_tiles, rows, ROPE_DIM, prefer_async=True, annotations=_NO_WAIT
    ):
        slot = T.max(slot_s[t * rows + j], 0)
        kv_s[t, j, NOPE_DIM + d] = _rope_value(kv_bf16, slot, d, block_size, tok_words)
    for j, d in T.Parallel(tail, ROPE_DIM, prefer_async=True, annotations=_NO_WAIT):
        slot = T.max(slot_s[full + j], 0)
        kv_tail[0, j, NOPE_DIM + d] = _rope_value(
            kv_bf16, slot, d, block_size, tok_words
        )
    for j in T.Parallel(full + tail, prefer_async=True, annotations=_NO_WAIT):
        slot = T.max(slot_s[j], 0)
        word_s[j] = _scale_word(kv_i64, slot, block_size, scale_off)
    T.ptx_commit_group()
    T.ptx_wait_group(0)
    T.sync_threads()
    for j, c in T.Parallel(full + tail, SCALE_BYTES_PER_TOKEN):
        scale_s[j, c] = _scale_of(word_s[j], c)
    T.sync_threads()


@T.macro
def _zero_dead_rope(kv_s, kv_tail, slot_s):
    """Dead slots (read as slot 0) become zeros: their RoPE columns."""
    n_tiles, rows = kv_s.shape[0], kv_s.shape[1]
    full = n_tiles * rows
    tail = kv_tail.shape[1]
    for t, j, d in T.Parallel(n_tiles, rows, ROPE_DIM):
        if slot_s[t * rows + j] < 0:
            kv_s[t, j, NOPE_DIM + d] = T.cast(0, T.bfloat16)
    for j, d in T.Parallel(tail, ROPE_DIM):
        if slot_s[full + j] < 0:
            kv_tail[0, j, NOPE_DIM + d] = T.cast(0, T.bfloat16)


def _raw_pair(kv_bf16, slot_s, r, k, block_size, tok_words):
    """NoPE bytes 2k and 2k + 1 of chunk slot r (slot 0 for a dead one) as
    one bf16 element of the cache's bf16 view."""
    slot = T.max(slot_s[r], 0)
    return kv_bf16[
        _page(kv_bf16, slot, block_size), (slot % block_size) * tok_words + k
    ]


def _dequantised(pair, b, slot_s, scale_s, r, k):
    """NoPE column 2k + b of chunk slot r as bf16: byte b of the staged pair
    (little-endian) times its scale; 0 for a dead slot."""
    bits = T.reinterpret(pair, T.uint16)
    byte = T.cast((bits >> 8 * b) & 255, T.uint8)
    return T.if_then_else(
        slot_s[r] >= 0,
        _scaled(
            T.reinterpret(byte, T.float8_e4m3fn), scale_s[r, (2 * k + b) // QUANT_BLOCK]
        ),
        T.cast(0, T.bfloat16),
    )


@T.macro
def _load_raw(kv_fp8, kv_bf16, nope, rope, slot_s, j0, block_size, tok_words):
    """Raw e4m3 NoPE bytes and bf16 RoPE values of chunk slots j0 ... into
    registers (dead slots read slot 0; the store masks them)."""
    for j, d in T.Parallel(nope.shape[0], NOPE_DIM):
        slot = T.max(slot_s[j0 + j], 0)
        nope[j, d] = _nope_byte(kv_fp8, slot, d, block_size)
    for j, d in T.Parallel(rope.shape[0], ROPE_DIM):
        slot = T.max(slot_s[j0 + j], 0)
        rope[j, d] = _rope_value(kv_bf16, slot, d, block_size, tok_words)


@T.macro
def _store_dequantised(dst, t, nope, rope, slot_s, scale_s, j0):
    """Registers -> bf16 tile dst[t]; dead slots become zeros."""
    for j, d in T.Parallel(nope.shape[0], NOPE_DIM):
        dst[t, j, d] = T.if_then_else(
            slot_s[j0 + j] >= 0,
            _scaled(nope[j, d], scale_s[j0 + j, d // QUANT_BLOCK]),
            T.cast(0, T.bfloat16),
        )
    for j, d in T.Parallel(rope.shape[0], ROPE_DIM):
        dst[t, j, NOPE_DIM + d] = T.if_then_else(
            slot_s[j0 + j] >= 0, rope[j, d], T.cast(0, T.bfloat16)
        )


@T.macro
def _dequant_slot(
    kv_fp8, kv_bf16, kv_s, kv_tail, j, slot_s, scale_s, block_size, tok_words
):  # fmt: skip
    """Chunk slot j into its resident tile (the slow path's loop body)."""
    full = kv_s.shape[0] * kv_s.shape[1]
    if j < full:
        _dequant_row(
            kv_fp8, kv_bf16, kv_s, j // kv_s.shape[1], j % kv_s.shape[1], j, slot_s,
            scale_s, block_size, tok_words,
        )  # fmt: skip
    else:
        _dequant_row(
            kv_fp8, kv_bf16, kv_tail, 0, j - full, j, slot_s, scale_s, block_size,
            tok_words,
        )  # fmt: skip


@T.macro
def _dequant_row(
    kv_fp8, kv_bf16, dst, t, row, j, slot_s, scale_s, block_size, tok_words
):  # fmt: skip
    slot = T.max(slot_s[j], 0)
    live = slot_s[j] >= 0
    for d in T.Parallel(NOPE_DIM):
        dst[t, row, d] = T.if_then_else(
            live,
            _scaled(
                _nope_byte(kv_fp8, slot, d, block_size),
                scale_s[j, d // QUANT_BLOCK],
            ),
            T.cast(0, T.bfloat16),
        )
    for d in T.Parallel(ROPE_DIM):
        dst[t, row, NOPE_DIM + d] = T.if_then_else(
            live,
            _rope_value(kv_bf16, slot, d, block_size, tok_words),
            T.cast(0, T.bfloat16),
        )


# Expressions the gathers (and the slow path's a slot at a time) build:
# where a slot's bytes are, and the dequantisation.
def _page(kv, slot, block_size):
    """The page of a cache slot, clamped into the cache: TileLang can then
    prove the load in bounds and adds no guard (a branch around every gather
    load, whose join unpacked the loaded bytes right after each load)."""
    return T.max(T.min(slot // block_size, kv.shape[0] - 1), 0)


def _nope_byte(kv_fp8, slot, d, block_size):
    page = _page(kv_fp8, slot, block_size)
    return kv_fp8[page, (slot % block_size) * TOKEN_DATA_BYTES + d]


def _rope_value(kv_bf16, slot, d, block_size, tok_words):
    page = _page(kv_bf16, slot, block_size)
    return kv_bf16[page, (slot % block_size) * tok_words + NOPE_DIM // 2 + d]


def _scale_word(kv_i64, slot, block_size, scale_off):
    """A slot's UE8M0 scale bytes: one int64 in its page's scale block."""
    page = _page(kv_i64, slot, block_size)
    return kv_i64[page, scale_off // 8 + slot % block_size]


def _scaled(raw, scale):
    """An e4m3 value times its bf16 power-of-two scale, as bf16."""
    return T.cast(T.cast(raw, T.float32) * T.cast(scale, T.float32), T.bfloat16)


@T.macro
def _attend_tile(
    q_s, kv3, t, j0, p, slot_s, len_s, acc, acc_o, m_i, m_prev, l_i, l_tile,
    alpha, pos0, scale_log2,
):  # fmt: skip
    """Tile kv3[t] (chunk slots j0 ...) of the online softmax: the streaming
    kernel's loop body without its gather; pos0: the chunk's first index
    position."""
    m_pad, cols = acc.shape
    for m, j in T.Parallel(m_pad, cols):
        acc[m, j] = T.if_then_else(
            (pos0 + j0 + j < len_s[m]) & (slot_s[j0 + j] >= 0),
            0,
            -T.infinity(T.float32),
        )
    T.gemm(q_s, kv3[t, :, :], acc, transpose_B=True, policy=T.GemmWarpPolicy.FullCol)
    T.copy(m_i, m_prev)
    T.reduce_max(acc, m_i, dim=1, clear=False)
    for m in T.Parallel(m_pad):
        m_i[m] = T.max(m_i[m], m_prev[m])
        alpha[m] = T.exp2((m_prev[m] - m_i[m]) * scale_log2)
    for m, j in T.Parallel(m_pad, cols):
        acc[m, j] = T.exp2((acc[m, j] - m_i[m]) * scale_log2)
    T.reduce_sum(acc, l_tile, dim=1)
    for m in T.Parallel(m_pad):
        l_i[m] = l_i[m] * alpha[m] + l_tile[m]
    for m, d in T.Parallel(m_pad, HEAD_DIM):
        acc_o[m, d] = acc_o[m, d] * alpha[m]
    T.copy(acc, p)
    T.gemm(p, kv3[t, :, :], acc_o, policy=T.GemmWarpPolicy.FullCol)
