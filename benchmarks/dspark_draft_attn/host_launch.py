# SPDX-License-Identifier: Apache-2.0
"""Host cost of one eager draft-attention launch, on a CPU: the wrapper's Python with its caches
(the tile and compile key chosen once per batch shape, the compiled kernel called directly, the
page and scratch views kept) against the same with the views rebuilt every call and against the
path without any of them (select_tile_config + launch_tile every call, TileLang's JIT parsing
every argument), same process, each timed twice (A-vs-A). No GPU needed.

  python -m benchmarks.dspark_draft_attn.host_launch --json out.json

The real tilelang JIT and compiled kernels (sm_90a, built here with nvcc as codegen.py does);
only the CUDA launch itself (tilelang's JITKernel.__call__) is replaced by a recorder, so the
figures are the Python in front of the launch, which is what an eager launch pays on top of
the kernel's device time. The run also checks that both paths hand the same compiled kernel
the same tensors. Device timings of both paths: `draft_attn_gpu eager` on a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.dspark_draft_attn import codegen

SIZES = ((1, 64), (8, 16), (256, 64))


def _setup(tree: Path):
    import torch

    tilelang, pass_configs, dc, dk = codegen._load_kernel_modules(tree)
    from tilelang.jit.kernel import JITKernel

    launches: list[tuple[int, tuple]] = []
    JITKernel.__call__ = lambda self, *args, **kw: launches.append((id(self), args))
    # the tree's tilelang_jit was left undecorating (codegen): decorate here, for sm_90a
    jits: dict[Any, Any] = {}
    owner_type = dk.DSparkDraftAttnTileLangKernel
    undecorated = owner_type.kernel

    def kernel(key):
        fn = undecorated(key)
        if fn not in jits:
            jits[fn] = tilelang.jit(pass_configs=pass_configs, target={"kind": "cuda", "arch": "sm_90a"})(fn)
        return jits[fn]

    owner_type.kernel = staticmethod(kernel)
    torch.cuda.is_current_stream_capturing = lambda: False  # CPU torch
    dk._sm_count = lambda device: 132  # an H100
    return torch, dc, dk, launches


def per_call_us(fn, calls: int, blocks: int = 7) -> float:
    """The median over blocks of the mean time a call (a shared 2-core machine is noisy)."""
    times = []
    for _ in range(blocks):
        t0 = time.perf_counter()
        for _ in range(calls // blocks):
            fn()
        times.append((time.perf_counter() - t0) / (calls // blocks) * 1e6)
    return sorted(times)[blocks // 2]


def measure(tree: Path, sizes=SIZES, calls: int = 2000) -> dict[str, Any]:
    torch, dc, dk, launches = _setup(tree)
    from vllm.model_executor.warmup.jit_warmup_tilelang_helper import compile_tilelang

    def described(args):  # page_views makes new view objects each call: compared by what they are
        return [(a.data_ptr(), a.dtype, tuple(a.shape), a.stride()) for a in args]
    owner = dk._DSPARK_DRAFT_ATTN_TILELANG_KERNEL
    page = dc.fp8_ds_mla_page_bytes(64)
    pool = torch.zeros(256 * 5 + 8, page, dtype=torch.uint8)
    width = dc.dspark_index_width(128, 5)
    rows = []
    for r, h in sizes:
        q = torch.zeros(r * 5, h, 512, dtype=torch.bfloat16)
        idx = torch.zeros(r * 5, 1, width, dtype=torch.int32)
        lens, sink, out = torch.zeros(r * 5, dtype=torch.int32), torch.zeros(h), torch.empty_like(q)

        def launch(q=q, idx=idx, lens=lens, sink=sink, out=out):
            dk.dspark_draft_attention(q, pool, idx, lens, sink, out, num_queries=5, scale=512**-0.5,
                                      block_size=64, page_bytes=page, capability=(9, 0))

        def generic(launch=launch):
            dk.clear_launch_caches()
            launch()

        def views_rebuilt(launch=launch):  # the cached path before the views were kept
            dk._PAGE_VIEWS.clear()
            dk._SCRATCH_VIEWS.clear()
            launch()

        tile, _, key, _ = dk._launch_plan(r, h, 5, width, 64, page, 512**-0.5, (9, 0), 132, None)
        compile_tilelang(owner.kernel(key), *type(owner).__call__.__wrapped__(
            owner, **owner.warmup_inputs(key))[1])  # vLLM's warm-up: compiled before any launch
        owner.reuse_compiled = False
        launches.clear()
        generic()
        launch()
        owner.reuse_compiled = True
        launch()  # kept
        launch()  # the kept kernel
        (k_tl, a_tl), _, _, (k_kept, a_kept) = launches
        same = k_tl == k_kept and described(a_tl) == described(a_kept)
        row: dict[str, Any] = dict(R=r, H=h, N=5, tile=f"{tile.heads_per_cta} heads, {tile.block_kv}-token, "
                                   f"{tile.kv_splits} splits{', resident' if tile.resident else ''}",
                                   same_kernel_same_tensors=same)
        for name, fn, reuse in (("cached", launch, True), ("views_rebuilt", views_rebuilt, True),
                                ("generic", generic, False)):
            owner.reuse_compiled = reuse
            for rep in ("", "_again"):
                row[f"{name}_us{rep}"] = per_call_us(fn, calls)
        owner.reuse_compiled = True
        row["speedup"] = row["generic_us"] / row["cached_us"]
        row["aa_spread_cached"] = abs(row["cached_us"] - row["cached_us_again"]) / min(
            row["cached_us"], row["cached_us_again"])
        row["aa_spread_generic"] = abs(row["generic_us"] - row["generic_us_again"]) / min(
            row["generic_us"], row["generic_us_again"])
        rows.append(row)
    import tilelang

    model = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                  if ln.startswith("model name")), platform.machine()) if Path("/proc/cpuinfo").exists() else ""
    env = dict(python=sys.version.split()[0], cpu=model or platform.machine(), cores=os.cpu_count(),
               torch=torch.__version__, tilelang=tilelang.__version__, date=time.strftime("%Y-%m-%d"))
    return dict(env=env, rows=rows, ok=all(row["same_kernel_same_tensors"] for row in rows))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", type=Path, default=codegen.ROOT / "build/vllm")
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    rep = measure(a.tree, calls=a.calls)
    for row in rep["rows"]:
        print(f"R={row['R']:4d} H={row['H']:2d} ({row['tile']}): cached {row['cached_us']:6.1f} / "
              f"{row['cached_us_again']:6.1f} us, views rebuilt {row['views_rebuilt_us']:6.1f} / "
              f"{row['views_rebuilt_us_again']:6.1f} us, generic {row['generic_us']:6.1f} / "
              f"{row['generic_us_again']:6.1f} us "
              f"a launch: {row['speedup']:.1f}x; same kernel and tensors: {row['same_kernel_same_tensors']}")
    if a.json:
        a.json.write_text(json.dumps(rep, indent=1))
    return 0 if rep["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
