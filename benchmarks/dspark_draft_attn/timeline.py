# SPDX-License-Identifier: Apache-2.0
"""Where a CTA of the draft-attention kernel spends its time: in-kernel timestamps on a GPU.

The ablations (ablate.py) time the whole kernel with a part cut out; this reads the clock
inside it. The plain kernel's own source gets a `stamps` argument and, at named points,
thread 0 of every CTA writes `clock64()` there (entry, after the lens / index reads, after
the prologue, per KV tile: loop top, dequantised, S = QK^T done, softmax done; after the
loop, after the split's partial stores, after the cluster barrier, end) plus `%globaltimer`
at entry and end (to convert cycles to ns and to see when each CTA started). One launch per
case, L2 hot (the same launch repeated) and cold (a 256 MB memset first), after warm-up.
Reported per point: the median and max over CTAs of the time since the CTA's entry, and the
spread of CTA entries (waves, launch skew) beside the kernel's span.

--kernel resident stamps the KV-resident kernel (R = 256's launch) instead: entry, the window
gathered, then per pass (a 64-row query group) its top, Q ready (the first chunk's wait), each
tile's top (two 64-token tiles and the 16-token tail), the tiles done, the sink folded in, the
output stores issued; cases at R = 8 (one CTA a request's head group, an idle GPU), 132 (one
wave) and 256 (two), at 64 and 16 heads; --gather picks the resident kernel's gather (async,
the default, bulk or registers).

The stamps cost a few instructions each and keep the compiler from moving work across them,
so the total is a little above the unstamped kernel's: read the phases, not the total.

    python -m benchmarks.dspark_draft_attn.timeline --json out.json [--kernel resident [--gather registers]]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any, NamedTuple

from benchmarks.dspark_draft_attn import ablate
from benchmarks.dspark_draft_attn import draft_attn_gpu as g

MAX_TILES = 3  # width 192 / 64-token tiles
SLOTS = 32
# stamp name -> slot; tile points get TILE_BASE + tile * len(TILE_POINTS) + i
GT_ENTRY, GT_END = 0, 1
POINTS = {"entry": 2, "lens_idx": 3, "prologue": 4}
TILE_BASE = 5
TILE_POINTS = ("tile_top", "dequantised", "gemm1", "softmax")
AFTER = {
    "loop_done": TILE_BASE + MAX_TILES * len(TILE_POINTS),
    "partials_stored": TILE_BASE + MAX_TILES * len(TILE_POINTS) + 1,
    "cluster_synced": TILE_BASE + MAX_TILES * len(TILE_POINTS) + 2,
    "end": TILE_BASE + MAX_TILES * len(TILE_POINTS) + 3,
}

# own lines: TileLang pastes it into the generated file beside its own #if / #endif lines
_GLOBALTIMER = (
    "\n__device__ __forceinline__ long long dspark_globaltimer() {"
    ' long long t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t; }\n'
)


def _stamp(indent: str, slot: str, timer: str = "clock64") -> str:
    return (
        f"{indent}if T.get_thread_binding() == 0:\n"
        f'{indent}    stamps[rid, bx, {slot}] = T.call_extern("int64", "{timer}")\n'
    )


# (anchor line in the kernel, stamp text inserted before it); every anchor must occur once
def _edits() -> list[tuple[str, str]]:
    i8, i12 = " " * 8, " " * 12
    tile = lambda k: f"{TILE_BASE} + tt * {len(TILE_POINTS)} + {k}"  # noqa: E731
    return [
        (f"{i8}if q_async:\n{i8}    # Q first", f"{i8}T.import_source({_GLOBALTIMER!r})\n"
         + _stamp(i8, str(GT_ENTRY), "dspark_globaltimer") + _stamp(i8, str(POINTS["entry"]))),
        (f"{i8}# Row m of the CTA is query q0 + m // heads_per_cta", _stamp(i8, str(POINTS["lens_idx"]))),
        (f"{i8}# num_stages > 1: the raw bytes", _stamp(i8, str(POINTS["prologue"]))),
        (f"{i12}t = tt * kv_splits + split\n", _stamp(i12, tile(0))),
        (f"{i12}for m, j in T.Parallel(m_pad, block_kv):\n{i12}    acc_s[m, j] = T.if_then_else(",
         _stamp(i12, tile(1))),
        (f"{i12}T.copy(m_i, m_prev)\n", _stamp(i12, tile(2))),
        (f"{i12}T.copy(acc_s, p_s)\n", _stamp(i12, tile(3))),
        (f"{i8}if kv_splits == 1:\n{i12}# Fold the sink", _stamp(i8, str(AFTER["loop_done"]))),
        # the split's merge through L2 scratch
        (f"{i12}T.sync_threads()\n{i12}T.cluster_sync()\n", _stamp(i12, str(AFTER["partials_stored"]))),
        (f"{i12}_merge_splits(\n", _stamp(i12, str(AFTER["cluster_synced"]))),
    ]


def stamped_source() -> str:
    """The plain kernel function with a `stamps` argument and the stamps inserted."""
    src = ablate.plain_kernel_source()
    for anchor, stamp in _edits():
        if src.count(anchor) != 1:
            raise ValueError(f"timeline: anchor {anchor!r} occurs {src.count(anchor)} times in the kernel")
        src = src.replace(anchor, stamp + anchor)
    for old, new in (
        ("    part_ml,\n    num_heads: int,", "    part_ml,\n    stamps,\n    num_heads: int,"),
        ("    part_ml: T.Tensor[[num_parts, 2, part_rows], T.float32]",
         f"    stamps: T.Tensor[[num_reqs, head_groups * q_groups * kv_splits, {SLOTS}], T.int64]  # type: ignore\n"
         "    part_ml: T.Tensor[[num_parts, 2, part_rows], T.float32]"),
    ):
        if src.count(old) != 1:
            raise ValueError(f"timeline: {old!r} occurs {src.count(old)} times in the kernel")
        src = src.replace(old, new)
    src = src.rstrip("\n") + "\n" + _stamp(" " * 8, str(AFTER["end"])) + _stamp(
        " " * 8, str(GT_END), "dspark_globaltimer")
    return src.replace("def dspark_draft_attn_tilelang(", "def timeline_dspark_draft_attn(", 1)


def jit_stamped(gather: str = ablate.GATHERS[0]):
    assert gather == ablate.GATHERS[0], "--gather is the KV-resident kernel's"
    return ablate.jit_source(stamped_source(), "timeline_dspark_draft_attn")


# The KV-resident kernel: points outside the pass loop, then PASS_POINTS per pass
RES_POINTS = {"entry": 2, "gathered": 3, "end": 4}
PASS_BASE = 5
PASS_POINTS = ("pass_top", "q_ready", "t0_top", "t1_top", "tail_top", "tiles_done", "sink_done", "stored")
MAX_PASSES = 7  # 64 heads x 1 query at N = 7
RES_SLOTS = 64
assert PASS_BASE + MAX_PASSES * len(PASS_POINTS) <= RES_SLOTS


def _resident_edits() -> list[tuple[str, str]]:
    i8, i12, i16, i20, i24 = (" " * n for n in (8, 12, 16, 20, 24))
    at = lambda k: f"{PASS_BASE} + p * {len(PASS_POINTS)} + {k}"  # noqa: E731
    point = PASS_POINTS.index
    return [
        (f"{i8}# The first pass's Q in flight", f"{i8}if gather != \"bulk\":\n{i12}T.import_source({_GLOBALTIMER!r})\n"
         + _stamp(i8, str(GT_ENTRY), "dspark_globaltimer") + _stamp(i8, str(RES_POINTS["entry"]))),
        (f"{i8}for p in T.serial(n_pass):\n", _stamp(i8, str(RES_POINTS["gathered"]))),
        (f"{i16}q0 = grp * qpc\n", _stamp(i16, at(point("pass_top")))),
        (f"{i20}for t in T.serial(resident_tiles):\n", _stamp(i20, at(point("q_ready")))),
        # t0_top, t1_top: the loop's tile t (resident_tiles == 2, as resident_tile sets)
        (f"{i24}if c * cap + t * block_kv < live_len:\n", _stamp(i24, at(f"{point('t0_top')} + t"))),
        (f"{i20}if c * cap + full < live_len:\n", _stamp(i20, at(point("tail_top")))),
        (f"{i16}# Q's copies are waited on in the chunk loop", _stamp(i16, at(point("tiles_done")))),
        (f"{i16}# through q_s (free until the next pass)", _stamp(i16, at(point("sink_done")))),
    ]


GATHERS = ablate.GATHERS


def resident_stamped_source(gather: str = GATHERS[0]) -> str:
    """The KV-resident kernel function with a `stamps` argument, the stamps inserted and
    `gather` as its gather's default."""
    src = ablate.function_source("dspark_draft_attn_resident.py", "dspark_draft_attn_resident_tilelang")
    for anchor, stamp in _resident_edits():
        if src.count(anchor) != 1:
            raise ValueError(f"timeline: anchor {anchor!r} occurs {src.count(anchor)} times in the resident kernel")
        src = src.replace(anchor, stamp + anchor)
    out_type = "    out: T.Tensor[[num_reqs, num_queries, num_heads, HEAD_DIM], T.bfloat16]"
    for old, new in (
        ablate.gather_edit(gather),
        # one import_source a kernel (TileLang refuses a second): the bulk gather's carries it
        (" " * 12 + "T.import_source(_BULK_SOURCE)\n",
         " " * 12 + f"T.import_source(_BULK_SOURCE + {_GLOBALTIMER!r})\n"),
        ("    out,\n    num_heads: int,", "    out,\n    stamps,\n    num_heads: int,"),
        (out_type, f"    stamps: T.Tensor[[num_reqs, head_groups * cta_groups, {RES_SLOTS}], T.int64]  "
         f"# type: ignore\n{out_type}"),
    ):
        if src.count(old) != 1:
            raise ValueError(f"timeline: {old!r} occurs {src.count(old)} times in the resident kernel")
        src = src.replace(old, new)
    # the pass's last statement is its output stores: "stored" after them, in the pass
    src = (src.rstrip("\n") + "\n" + _stamp(" " * 16, f"{PASS_BASE} + p * {len(PASS_POINTS)} + "
                                              f"{PASS_POINTS.index('stored')}")
           + _stamp(" " * 8, str(RES_POINTS["end"])) + _stamp(" " * 8, str(GT_END), "dspark_globaltimer"))
    return src.replace("def dspark_draft_attn_resident_tilelang(", "def timeline_dspark_draft_attn_resident(", 1)


def jit_resident_stamped(gather: str = GATHERS[0]):
    from vllm.models.deepseek_v4.nvidia.ops import dspark_draft_attn_resident as dr

    return ablate.jit_source(resident_stamped_source(gather), "timeline_dspark_draft_attn_resident",
                             module=dr)


def resident_stamped_args(b: g.Batch, out, cfg, stamps) -> tuple:
    """The resident kernel's launch arguments with stamps after out."""
    args = list(ablate.args_for(b, out, cfg))
    out_at = 7  # q, kv_fp8, kv_i64, kv_bf16, indices, lens, attn_sink, out
    return (*args[: out_at + 1], stamps, *args[out_at + 1 :])


def resident_names() -> dict[int, str]:
    out = {v: k for k, v in RES_POINTS.items()}
    for p in range(MAX_PASSES):
        for i, name in enumerate(PASS_POINTS):
            out[PASS_BASE + p * len(PASS_POINTS) + i] = f"p{p}_{name}"
    return out


class Layout(NamedTuple):
    """Where a stamped kernel keeps its points: slots a CTA, names, entry and end slots."""

    slots: int
    names: dict[int, str]
    entry: int
    end: int


def stamped_args(b: g.Batch, out, cfg, stamps) -> tuple:
    """The kernel's launch arguments (as its owner lays them out) with stamps after part_ml."""
    args = list(ablate.args_for(b, out, cfg))
    part_ml_at = 9  # q, kv_fp8, kv_i64, kv_bf16, indices, lens, attn_sink, out, part_o, part_ml
    return (*args[: part_ml_at + 1], stamps, *args[part_ml_at + 1 :])


def names() -> dict[int, str]:
    out = {v: k for k, v in POINTS.items()} | {v: k for k, v in AFTER.items()}
    for t in range(MAX_TILES):
        for i, p in enumerate(TILE_POINTS):
            out[TILE_BASE + t * len(TILE_POINTS) + i] = f"t{t}_{p}"
    return out


def plain_layout() -> Layout:
    return Layout(SLOTS, names(), POINTS["entry"], AFTER["end"])


def resident_layout() -> Layout:
    return Layout(RES_SLOTS, resident_names(), RES_POINTS["entry"], RES_POINTS["end"])


def summarise(stamps, layout: Layout | None = None) -> dict[str, Any]:
    """Per point: median / max over CTAs of ns since the CTA's entry; CTA entry spread."""
    lay = layout or plain_layout()
    s = stamps.reshape(-1, lay.slots).cpu().tolist()
    ns_per_cycle = statistics.median(
        (c[GT_END] - c[GT_ENTRY]) / (c[lay.end] - c[lay.entry]) for c in s if c[lay.end] > c[lay.entry] > 0
    )
    points = {}
    for slot, name in sorted(lay.names.items()):
        d = [(c[slot] - c[lay.entry]) * ns_per_cycle / 1000 for c in s if c[slot] >= 0]
        if d:
            points[name] = dict(median_us=statistics.median(d), max_us=max(d), ctas=len(d))
    t0 = min(c[GT_ENTRY] for c in s)
    entries = sorted((c[GT_ENTRY] - t0) / 1000 for c in s)
    return dict(
        ns_per_cycle=ns_per_cycle,
        ctas=len(s),
        points=points,
        entry_spread_us=dict(median=statistics.median(entries), max=entries[-1]),
        span_us=(max(c[GT_END] for c in s) - t0) / 1000,
        cta_us=dict(median=statistics.median((c[GT_END] - c[GT_ENTRY]) / 1000 for c in s),
                    max=max((c[GT_END] - c[GT_ENTRY]) / 1000 for c in s)),
    )


def cases() -> list[tuple[int, int, Any]]:
    """(R, heads, tile): unsplit at R = 256, and at R = 1 the split launch R = 1 took in runs
    24-45 (launch_tile with the width, 192, as the live slots: 4 heads a CTA, 32-token tiles
    over 6 CTAs, the merge through L2 scratch with its partial outputs copied in before the
    factor pass) and without that copy. Runs 18-20 had the dsmem_merge
    and 8 / 2 heads cases, runs 23 and 29-30 options since removed (dsmem_merge too, on
    2026-12-07), runs 24-26 64-token tiles over 3."""
    sm90 = g.dc.select_tile_config(64, 5, (9, 0))
    launch = g.dc.launch_tile(sm90, 1, 64, 192, 132, (9, 0), 5)
    tiles = (launch, g.replace(launch, merge_prefetch=False))
    return [(256, 16, g.dc.select_tile_config(16, 5, (9, 0)))] + [
        (r, h, tile) for r, h in ((1, 64), (1, 16)) for tile in tiles
    ]


def resident_cases() -> list[tuple[int, int, Any]]:
    """(R, heads, the KV-resident tile launch_tile takes there at R = 256): an idle GPU (R = 8),
    one wave (132) and two (256), at 64 heads (64 x 1, 5 passes) and 16 (16 x 4, 2 passes)."""
    tiles = {h: g.dc.resident_tile(g.dc.select_tile_config(h, 5, (9, 0)), h, 5) for h in (64, 16)}
    return [(r, h, tiles[h]) for h in (64, 16) for r in (8, 132, 256)]


# kernel name -> (cases, jit of the stamped kernel, its launch arguments, its layout)
KERNELS = {
    "plain": (cases, jit_stamped, stamped_args, plain_layout),
    "resident": (resident_cases, jit_resident_stamped, resident_stamped_args, resident_layout),
}


def _compile(job: tuple[str, str, int, Any]) -> None:
    kernel, gather, h, cfg = job
    import torch

    _, jit, args_of, layout = KERNELS[kernel]
    b = g.plain_batch(1, h, 7000 + h)
    stamps = torch.full((1, g.dc.launch_ctas(cfg, 1, h, 5), layout().slots), -1, dtype=torch.int64,
                        device="cuda")
    jit(gather).compile(*args_of(b, torch.empty_like(b.q), cfg, stamps))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", required=True)
    ap.add_argument("--procs", type=int, default=8)
    ap.add_argument("--kernel", choices=tuple(KERNELS), default="plain")
    ap.add_argument("--gather", choices=GATHERS, default=GATHERS[0],
                    help="with --kernel resident: the resident kernel's gather")
    a = ap.parse_args(argv)
    if a.gather != GATHERS[0] and a.kernel != "resident":
        ap.error("--gather is the KV-resident kernel's (--kernel resident)")
    import torch

    cases_of, jit, args_of, layout_of = KERNELS[a.kernel]
    layout = layout_of()
    rep: dict[str, Any] = dict(env=g.env_info(), kernel=a.kernel, gather=a.gather, rows=[])

    def save() -> None:
        Path(a.json).write_text(json.dumps(rep, indent=1, default=str))

    jobs = sorted({(a.kernel, a.gather, h, cfg) for _, h, cfg in cases_of()}, key=repr)
    rep["precompile"] = g.compile_in_processes(_compile, jobs, a.procs)
    save()
    kern = jit(a.gather)
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    for r, h, cfg in cases_of():
        row: dict[str, Any] = dict(R=r, H=h, heads_per_cta=cfg.heads_per_cta, kv_splits=cfg.kv_splits,
                                   block_kv=cfg.block_kv, merge_prefetch=cfg.merge_prefetch,
                                   resident=cfg.resident, queries_per_cta=g.dc.cta_queries(5, cfg))
        try:
            b = g.plain_batch(r, h, 7000 + r + h)
            out = torch.empty_like(b.q)
            stamps = torch.full((r, g.dc.launch_ctas(cfg, 1, h, 5), layout.slots), -1,
                                dtype=torch.int64, device="cuda")
            args = args_of(b, out, cfg, stamps)
            for _ in range(5):
                kern(*args)
            torch.cuda.synchronize()
            # the stamped kernel still computes: a wrong output would make its times moot
            row["ok"] = g.compare(out, g.reference(b), b.lens)["ok"]
            row["hot"] = summarise(stamps, layout)
            flush.zero_()
            stamps.fill_(-1)
            kern(*args)
            torch.cuda.synchronize()
            row["cold"] = summarise(stamps, layout)
        except Exception as e:  # noqa: BLE001 - reported
            row["error"] = f"{type(e).__name__}: {str(e)[:400]}"
        rep["rows"].append(row)
        print(json.dumps(row), flush=True)
        save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
