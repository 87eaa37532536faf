# SPDX-License-Identifier: Apache-2.0
"""Where the draft-attention kernel's time goes: ablations of the TileLang kernel on a GPU.

Each variant is the kernel's own source with one part cut out (text edits of the function,
compiled with vLLM's pass configs), timed per layer in a CUDA graph (hot L2, no host cost)
at R=1 and R=256, beside the whole kernel, the whole kernel with every length 0 (prologue and
epilogue only) and the kernel list one call launches (torch.profiler). A variant's output is
wrong by construction: this is for finding the bottleneck, not a check.

--kernel resident ablates the KV-resident kernel (R = 256's launch) instead, at R = 8, 132
and 256 (RESIDENT_VARIANTS: edits of the kernel function and of its tile macro), timed in a
CUDA graph with L2 hot and cold. Its `registers_out` variant is a correct kernel (the output
stored from registers instead of through Q's buffer, nothing else changed): it separates that
cost from the next Q's prefetch, which runs 40-41 and 55 only measured together.

    python -m benchmarks.dspark_draft_attn.ablate --json out.json [--kernel resident]
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.dspark_draft_attn import draft_attn_gpu as g

# variant -> (old, new) text edits of the kernel function; every `old` must occur
VARIANTS: dict[str, list[tuple[str, str]]] = {
    "whole": [],
    "no_gemms": [
        ("T.gemm(q_s, k_s, acc_s, transpose_B=True, policy=T.GemmWarpPolicy.FullCol)", "pass"),
        ("T.gemm(p_s, k_s, acc_o, policy=T.GemmWarpPolicy.FullCol)", "pass"),
    ],
    "no_gemm1": [("T.gemm(q_s, k_s, acc_s, transpose_B=True, policy=T.GemmWarpPolicy.FullCol)", "pass")],
    "no_softmax_reductions": [
        ("T.reduce_max(acc_s, m_i, dim=1, clear=False, batch=reduce_batch)", "pass"),
        ("T.reduce_sum(acc_s, l_tile, dim=1, batch=reduce_batch)", "T.fill(l_tile, 1.0)"),
    ],
    "no_exp": [("acc_s[m, j] = T.exp2((acc_s[m, j] - m_i[m]) * scale_log2)", "acc_s[m, j] = acc_s[m, j] - m_i[m]")],
    "no_dequant": [
        ("T.cast(fp8_s[j, d], T.float32)", "T.cast(1.0, T.float32)"),
        ("live_s[j], rope_s[j, d], T.cast(0, T.bfloat16)", "live_s[j], T.cast(1, T.bfloat16), T.cast(0, T.bfloat16)"),
    ],
    # every gather reads slot 0 (one L2-resident token): the copies stay, DRAM traffic goes
    # (a live length of 0 inside the three gathers' slot lookups: _gather_slot gives slot 0)
    "gather_slot0": [("_gather_slot(idx_s, t * block_kv + j, live_len)", "_gather_slot(idx_s, t * block_kv + j, 0)")],
    # at most one KV tile: (whole - one_tile) / (tiles - 1) is the cost of a tile
    "one_tile": [("live_len = T.min(max_len, width)", "live_len = T.min(max_len, block_kv)")],
    # split launches through L2 scratch (kv_splits > 1; the same as whole
    # unsplit): no partial-state stores, no cluster barrier and a one-row merge
    "no_partial_store": [("part_o[part + split, m, d] = acc_o[m, d]", "pass")],
    "no_cluster_merge": [
        ("T.sync_threads()\n            T.cluster_sync()", "T.sync_threads()"),
        ("merge_rows = merge_slice_rows(rows, kv_splits, merge_prefetch)", "merge_rows = 1"),
    ],
}


# "bulk_gather" (a correct kernel, num_stages == 1 tiles only): each live slot's 576-byte record
# by one cp.async.bulk into a record buffer (the resident kernel's gather="bulk", run 67), the
# scale words by cp.async, then the tile's 16-byte chunks dequantised from the records, in place
# of the per-element gathers into fp8_s / rope_s and the per-element dequantisation
_BULK_ALLOCS = """\
        T.import_source(_BULK_SOURCE)
        rec_s = T.alloc_shared([block_kv * TOKEN_DATA_BYTES], T.uint8)
        tile_bar = T.alloc_barrier(block_kv)
"""
_BULK_TILE = """\
            T.sync_threads()
            if T.get_thread_binding() < block_kv:
                jb = T.get_thread_binding()
                slot_b = idx_s[t * block_kv + jb]
                # num_blocks > 0: the copy's own guard (tilelang 0.1.15), which the bytes must share
                if (t * block_kv + jb < live_len) & (slot_b >= 0) & (num_blocks > 0):
                    T.mbarrier_arrive_expect_tx(tile_bar[0], TOKEN_DATA_BYTES)
                    T.call_extern(
                        "handle", "dspark_bulk_record", T.address_of(rec_s[0]), T.address_of(rec_s[0]),
                        block_kv, jb,
                        T.address_of(kv_i64[
                            T.min(slot_b // block_size, num_blocks - 1),
                            (slot_b % block_size) * (TOKEN_DATA_BYTES // 8),
                        ]),
                        tile_bar[0],
                    )
                else:
                    T.mbarrier_arrive(tile_bar[0])
            for j in T.Parallel(block_kv, prefer_async=True,
                                annotations={"parallel_async_without_async_commit_wait": True}):
                live_slot = _gather_slot(idx_s, t * block_kv + j, live_len)
                scale_s[j] = kv_i64[
                    live_slot // block_size, scale_off // 8 + live_slot % block_size
                ]
            T.ptx_commit_group()
            for j in T.Parallel(block_kv):
                pos = t * block_kv + j
                live_s[j] = (pos < live_len) & (idx_s[pos] >= 0)
            T.ptx_wait_group(0)
            T.mbarrier_wait_parity(tile_bar[0], tt % 2)
            T.sync_threads()
            for i in T.unroll(-(-block_kv * 64 // threads)):
                job = i * threads + T.get_thread_binding()
                if job < block_kv * 64:
                    T.call_extern(
                        "handle", "dspark_dequant16", T.address_of(k_s[job // 64, job % 64 * 8]),
                        T.address_of(rec_s[0]), T.address_of(rec_s[0]), block_kv, job // 64, job % 64,
                        scale_s[job // 64], live_s[job // 64],
                    )
"""
_BULK_IMPORT = "from vllm.models.deepseek_v4.nvidia.ops.dspark_draft_attn_resident import _BULK_SOURCE\n"


def _bulk_gather_edits() -> list[tuple[str, str]]:
    """The plain kernel's tile gather and dequantisation (from the first gather loop to the
    RoPE columns' copy) replaced by _BULK_TILE, its buffers joined by _BULK_ALLOCS."""
    src = plain_kernel_source()
    start = src.index("            for j, d in T.Parallel(block_kv, NOPE_DIM):\n                live_slot")
    end_mark = "                    live_s[j], rope_s[j, d], T.cast(0, T.bfloat16)\n                )\n"
    end = src.index(end_mark, start) + len(end_mark)
    alloc = "        scale_f = T.alloc_shared([block_kv, SCALE_BYTES_PER_TOKEN], T.float32)\n"
    return [(alloc, alloc + _BULK_ALLOCS), (src[start:end], _BULK_TILE)]


def _kernel_text() -> str:
    return Path(g.dc.__file__).with_name("dspark_draft_attn_tilelang.py").read_text()


def _edit(name: str, src: str) -> str:
    for old, new in (_bulk_gather_edits() if name == "bulk_gather" else VARIANTS[name]):
        if old not in src:
            raise ValueError(f"variant {name}: {old!r} not in the kernel")
        src = src.replace(old, new)
    return src


def variant_source(name: str) -> str:
    src = _edit(name, plain_kernel_source()).replace("def dspark_draft_attn_tilelang(", f"def ablate_{name}(", 1)
    return _BULK_IMPORT + src if name == "bulk_gather" else src


def plain_kernel_source() -> str:
    """The plain kernel function's source, without its decorator line."""
    return _function_text(_kernel_text(), "dspark_draft_attn_tilelang")


def function_source(file_name: str, name: str) -> str:
    """Function `name` of a kernel module's file (beside the plain kernel's), without its
    decorator line. Read, not imported: no tilelang needed."""
    return _function_text(Path(g.dc.__file__).with_name(file_name).read_text(), name)


def _function_text(text: str, name: str) -> str:
    fn = next(n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name == name)
    return "".join(text.splitlines(keepends=True)[fn.lineno - 1 : fn.end_lineno])


def jit_source(src: str, fn_name: str, module=None):
    """tilelang.jit (vLLM's pass configs) of function fn_name defined by src, in the namespace
    of `module` (default: the plain kernel's module)."""
    import tilelang
    from vllm.tilelang_utils import _get_pass_configs

    # TileLang parses the function from its source file: give the variant a real one
    path = Path(tempfile.gettempdir()) / f"dspark_draft_attn_{fn_name}.py"
    path.write_text(src)
    ns = dict(vars(module or g.dk))
    exec(compile(src, str(path), "exec"), ns)
    return tilelang.jit(pass_configs=_get_pass_configs())(ns[fn_name])


def jit_variant(name: str):
    return jit_source(variant_source(name), f"ablate_{name}")


def args_for(b: g.Batch, out, cfg) -> tuple:
    """The kernel function's positional arguments, as the kernel owner's launch spec lays
    them out (its undecorated __call__)."""
    key = g.compile_key(b.q.shape[1], b.n, cfg)
    owner = g.dk._DSPARK_DRAFT_ATTN_TILELANG_KERNEL
    _, launch_args = type(owner).__call__.__wrapped__(owner, **g.kernel_tensors(b, out, cfg), compile_key=key)
    return launch_args


# The KV-resident kernel's `gather` values, the default first
GATHERS = ("async", "bulk", "registers")


def gather_edit(gather: str) -> tuple[str, str]:
    """The edit of the resident kernel's source that makes `gather` its gather's default."""
    return (f'    gather: str = "{GATHERS[0]}",\n', f'    gather: str = "{gather}",\n')


# The KV-resident kernel: variant -> (edits of the kernel function, edits of _attend_tile)
RESIDENT_VARIANTS: dict[str, tuple[list[tuple[str, str]], list[tuple[str, str]]]] = {
    "whole": ([], []),
    # correct (built 2026-12-07, not yet run on a GPU): each slot's record by one cp.async.bulk,
    # staged in Q's buffer and the first tile, dequantised shared to shared, Q loaded after it
    "bulk_gather": ([gather_edit("bulk")], []),
    # correct: the gather of runs 36-58, every load of the window into registers
    "sync_gather": ([gather_edit("registers")], []),
    # correct: the output from the accumulator's registers (4-byte stores), Q's buffer unused:
    # no staging loop, the store loop over the padded rows (the accumulator's) and reading acc_o
    "registers_out": ([
        ("                for m, d in T.Parallel(m_pad, HEAD_DIM):\n"
         "                    q_s[m, d] = T.cast(acc_o[m, d] * alpha[m], T.bfloat16)\n", ""),
        ("T.Parallel(rows, HEAD_DIM):", "T.Parallel(m_pad, HEAD_DIM):"),
        ("] = q_s[m, d]\n", "] = T.cast(acc_o[m, d] * alpha[m], T.bfloat16)\n"),
    ], []),
    # the first pass's Q serves every pass: no Q trip between passes
    "no_pass_q": ([("                    T.sync_threads()\n"
                    "                    _issue_q(q, q_s, rid, q0, gid, heads_per_cta, qpc, num_queries)\n",
                    "                    T.sync_threads()\n")], []),
    # the output staged through Q's buffer, never stored
    "no_out_store": ([("                    if m < live_rows:\n                        out[",
                       "                    if m < -1:\n                        out[")], []),
    # (sm_90a codegen: ptxas spills 1.5 KB here, which the whole kernel does not: an upper bound)
    "no_gemms": ([], [
        ("T.gemm(q_s, kv3[t, :, :], acc, transpose_B=True, policy=T.GemmWarpPolicy.FullCol)", "pass"),
        ("T.gemm(p, kv3[t, :, :], acc_o, policy=T.GemmWarpPolicy.FullCol)", "pass"),
    ]),
    "no_softmax_reductions": ([], [
        ("T.reduce_max(acc, m_i, dim=1, clear=False)", "pass"),
        ("T.reduce_sum(acc, l_tile, dim=1)", "T.fill(l_tile, 1.0)"),
    ]),
}
RESIDENT_SIZES = ((8, 64), (132, 64), (256, 64), (256, 16))


def resident_variant_source(name: str) -> str:
    """The resident kernel function (renamed) after its own _attend_tile macro, both with the
    variant's edits: the kernel, executed after it in the module's namespace, expands it."""
    kernel_edits, macro_edits = RESIDENT_VARIANTS[name]

    def edited(function: str, edits: list[tuple[str, str]]) -> str:
        src = function_source("dspark_draft_attn_resident.py", function)
        for old, new in edits:
            if src.count(old) != 1:
                raise ValueError(f"resident variant {name}: {old!r} occurs {src.count(old)} times in {function}")
            src = src.replace(old, new)
        return src

    kernel = edited("dspark_draft_attn_resident_tilelang", kernel_edits)
    kernel = kernel.replace("def dspark_draft_attn_resident_tilelang(", f"def ablate_resident_{name}(", 1)
    return f"@T.macro\n{edited('_attend_tile', macro_edits)}\n\n{kernel}"


def jit_resident_variant(name: str):
    from vllm.models.deepseek_v4.nvidia.ops import dspark_draft_attn_resident as dr

    return jit_source(resident_variant_source(name), f"ablate_resident_{name}", module=dr)


def resident_tile(h: int):
    return g.dc.resident_tile(g.dc.select_tile_config(h, 5, (9, 0)), h, 5)


SIZES = ((1, 64), (256, 16))
# the SM90 default (wgmma; the mma.sync shape's ablation is in the run-4 and run-5 results),
# unsplit and the split tile R = 1 takes on the H200's 132 SMs (the latter at R = 1 only: at
# R = 256 it is never picked; runs 14-22 ablated the 8-head, 64-token split over 3 CTAs)
_SM90 = g.dc.select_tile_config(16, 5, (9, 0))  # 8 heads x all queries: valid at 64 and 16 heads
CONFIGS = (_SM90, g.dc.launch_tile(_SM90, 1, 64, 192, 132, (9, 0), 5))


def wanted(r: int, cfg) -> bool:
    return cfg.kv_splits == 1 or r <= 8


def _batch(r: int, h: int) -> g.Batch:
    return g.plain_batch(r, h, 5000 + r + h)


def _compile(job: tuple[str, int, Any]) -> None:
    name, h, cfg = job
    b = _batch(1, h)
    jit = jit_resident_variant(name) if cfg.resident else jit_variant(name)
    jit.compile(*args_for(b, g.torch.empty_like(b.q), cfg))


def resident_main(a, rep: dict[str, Any], save) -> int:
    """--kernel resident: RESIDENT_VARIANTS at RESIDENT_SIZES, graph hot and cold, each
    variant's error against the reference beside it (registers_out must be right)."""
    variants = a.variants.split(",") if a.variants else list(RESIDENT_VARIANTS)
    cases = [(r, h, resident_tile(h)) for r, h in RESIDENT_SIZES]
    _precompile(rep, save, cases, variants, a.procs)
    _time_variants(rep, save, cases, variants, jit_resident_variant, checked=lambda name: True)
    return 0


# the correct plain-kernel variants (their output is checked against the reference)
CORRECT_VARIANTS = ("whole", "bulk_gather")


def plain_ab_main(a, rep: dict[str, Any], save) -> int:
    """--kernel plain --variants V,...: the variants at --sizes (R x H, N = 5), each on the tile
    the library launches there (launch_tile), graph hot and cold (twice, A / A), the correct
    variants' output against the reference (`ok`)."""
    variants = a.variants.split(",")
    sizes = [tuple(int(x) for x in item.split("x")) for item in a.sizes.split(",")]
    sms = g.torch.cuda.get_device_properties(0).multi_processor_count
    cap = g.torch.cuda.get_device_capability(0)

    def tile(r: int, h: int):
        return g.dc.launch_tile(g.dc.select_tile_config(h, 5, cap), r, h, g.live_slots(5), sms, cap, 5)

    cases = [(r, h, tile(r, h)) for r, h in sizes]
    _precompile(rep, save, cases, variants, a.procs)
    _time_variants(rep, save, cases, variants, jit_variant, checked=lambda name: name in CORRECT_VARIANTS)
    return 0


def _precompile(rep: dict[str, Any], save, cases, variants: list[str], procs: int) -> None:
    """Every (variant, heads, tile) of the cases compiled once, in processes."""
    jobs = sorted({(v, h, cfg) for v in variants for _, h, cfg in cases}, key=repr)
    rep["precompile"] = g.compile_in_processes(_compile, jobs, procs)
    save()


def _time_variants(rep: dict[str, Any], save, cases, variants: list[str], jit, checked) -> None:
    """Each variant (compiled by jit(name)) at each (R, H, tile) case: graph hot and cold
    (twice, A / A), its output against the reference where checked(name); a row each, saved
    as it goes."""
    for r, h, cfg in cases:
        b = _batch(r, h)
        ref = g.reference(b)
        for name in variants:
            row: dict[str, Any] = dict(R=r, H=h, variant=name, **cfg.__dict__)
            try:
                kern = jit(name)
                out = g.torch.empty_like(b.q)
                args = args_for(b, out, cfg)
                fn = lambda args=args, kern=kern: kern(*args)  # noqa: E731
                fn()
                g.sync()
                if checked(name):
                    row["ok"] = g.compare(out, ref, b.lens)["ok"]
                row["graph_hot_us"] = g.graph_us([fn])
                row["graph_cold_us"] = g.cold_graph_us([fn])
                row["graph_cold_us_again"] = g.cold_graph_us([fn])  # A-vs-A
            except Exception as e:  # noqa: BLE001 - reported
                row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
            rep["rows"].append(row)
            print(json.dumps(row), flush=True)
            save()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", required=True)
    ap.add_argument("--procs", type=int, default=min(16, os.cpu_count() or 1))
    ap.add_argument("--kernel", choices=("plain", "resident"), default="plain")
    ap.add_argument("--variants", default="", help="a comma list of variants (default: all); with --kernel "
                    "plain, timed at --sizes on the tiles the library launches there, cold L2 too")
    ap.add_argument("--sizes", default="1x64,1x16,8x16,64x16", help="with --kernel plain --variants: RxH,...")
    a = ap.parse_args(argv)
    known = list(RESIDENT_VARIANTS) if a.kernel == "resident" else [*VARIANTS, "bulk_gather"]
    if a.variants and (unknown := sorted(set(a.variants.split(",")) - set(known))):
        ap.error(f"--variants: {', '.join(unknown)} not among the {a.kernel} kernel's {', '.join(known)}")
    import torch

    rep: dict[str, Any] = dict(env=g.env_info(), kernel=a.kernel, rows=[])

    def save() -> None:
        Path(a.json).write_text(json.dumps(rep, indent=1, default=str))

    if a.kernel == "resident":
        return resident_main(a, rep, save)
    if a.variants:
        return plain_ab_main(a, rep, save)

    jobs = [(v, h, c) for v in VARIANTS for r, h in SIZES for c in CONFIGS if wanted(r, c)]
    rep["precompile"] = g.compile_in_processes(_compile, jobs, a.procs)
    save()
    # the kernels one call of the real wrapper launches, with device times
    b = _batch(1, 64)
    out = torch.empty_like(b.q)
    g.run_kernel(b, out)
    g.sync()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            g.run_kernel(b, out)
        g.sync()
    rep["profile_R1_H64"] = [
        dict(name=e.key[:120], count=e.count, device_us_avg=e.device_time)
        for e in prof.key_averages() if e.device_time > 0
    ]
    save()
    for r, h in SIZES:
        b = _batch(r, h)
        zero = _batch(r, h)
        zero.lens.zero_()
        for name in VARIANTS:
            for cfg in CONFIGS:
                if not wanted(r, cfg):
                    continue
                row: dict[str, Any] = dict(R=r, H=h, variant=name, **cfg.__dict__)
                try:
                    kern = jit_variant(name)
                    out = torch.empty_like(b.q)
                    args = args_for(b, out, cfg)
                    row["graph_hot_us"] = g.graph_us([lambda args=args, kern=kern: kern(*args)])
                    if name == "whole":
                        zargs = args_for(zero, torch.empty_like(b.q), cfg)
                        row["graph_hot_us_all_lens_0"] = g.graph_us([lambda zargs=zargs, kern=kern: kern(*zargs)])
                except Exception as e:  # noqa: BLE001 - reported
                    row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
                rep["rows"].append(row)
                print(json.dumps(row), flush=True)
                save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
