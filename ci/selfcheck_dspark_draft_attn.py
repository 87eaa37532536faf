#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""GPU self-check of the TileLang DSpark draft attention (TILELANG_SPARSE_SWA_DSV4).

Run it on the machine that will serve (SM120/SM121 boxes in particular, where nothing of
this kernel was ever run by the project), with the patched vLLM and tilelang installed:

    python ci/selfcheck_dspark_draft_attn.py                  # correctness, benchmark, tile sweep
    python ci/selfcheck_dspark_draft_attn.py --json out.json  # also write the JSON report
    python ci/selfcheck_dspark_draft_attn.py --quick          # smaller matrix
    python ci/selfcheck_dspark_draft_attn.py --check-only     # no benchmark

The correctness matrix builds DSpark draft batches the way vLLM does (paged fp8_ds_mla SWA
cache, upstream's DSpark index kernel, padding requests, clamped seq_len, extreme sinks, e4m3
zeros and subnormals) and compares the kernel with an fp32 reference (max |err| <= 1e-2 beyond
bf16 rounding and <= 1 % of max |ref|; empty rows exactly zero; bitwise repeatable; CUDA-graph
capture + rewrite + replay). The benchmark compares it with upstream's Triton DSV4 sparse
decode and the torch reference, per layer and per 3-layer draft step; the sweep times every
candidate tile shape on this GPU (shapes over its shared memory are reported as errors, not
failures), which is what select_tile_config's SM12x values need from an SM120 box.

Exit status: 0 every result correct; 1 a wrong result or a crash in the matrix; 2 nothing
could be checked (no CUDA, no tilelang, no patched vLLM).
"""

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    # Parsed before anything heavy is imported, so --help and a mistyped flag answer on
    # any machine, not only on one with CUDA, tilelang and the patched vLLM.
    p = argparse.ArgumentParser(
        prog="selfcheck_dspark_draft_attn.py",
        description=__doc__.split("\n\n")[0],
        epilog="exit status: 0 every result correct; 1 a wrong result or a crash in "
        "the matrix; 2 nothing could be checked",
    )
    p.add_argument("--json", help="also write the JSON report here")
    p.add_argument("--quick", action="store_true", help="smaller matrix, no tile sweep")
    p.add_argument("--check-only", action="store_true", help="correctness only, no benchmark")
    p.add_argument("--sizes", help="tile sweep only at these RxH sizes, e.g. 1x64,8x16")
    return p.parse_args(argv)


def draft_attn_argv(args: argparse.Namespace) -> list[str]:
    """The benchmark's command line for these options."""
    argv = ["check" if args.check_only else "all"]
    if args.json:
        argv += ["--json", args.json]
    if args.quick:
        argv.append("--quick")
    if args.sizes:
        argv += ["--sizes", args.sizes]
    return argv


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        import tilelang  # noqa: F401
        import torch
        from vllm.models.deepseek_v4.nvidia.ops import dspark_draft_attn_common  # noqa: F401
    except ImportError as e:
        print(f"cannot check: {e}", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("cannot check: no CUDA device", file=sys.stderr)
        return 2
    from benchmarks.dspark_draft_attn import draft_attn_gpu

    return draft_attn_gpu.main(draft_attn_argv(args))


if __name__ == "__main__":
    sys.exit(main())
