# SPDX-License-Identifier: Apache-2.0
"""CPU codegen of the draft-attention kernel: the CUDA source TileLang generates for one tile
and, with nvcc on PATH, ptxas's registers and spills. No GPU needed.

  python -m benchmarks.dspark_draft_attn.codegen --heads 64 --queries 5 \\
      --set kv_splits=3 --set merge_prefetch=1 --out /tmp/k.cu --ptxas

The tile is select_tile_config's for the arch (--arch 90a or 120), with --set overriding
TileConfig fields. Used to check, before spending device time, that a variant builds, what
shared memory it lays out (the `buf_dyn_shmem + offset` lines) and what it costs in registers
(the kernel sits at 255 on SM90), and that a refactor leaves a tile's generated code
byte-identical.

Needs tilelang (vLLM 0.34.0 pins 0.1.12) and torch in the running Python, and build/vllm (or
--tree). vLLM's own package is not imported (its __init__ and platform layer want vLLM's
dependencies and a GPU): the kernel modules are loaded from the tree under bare packages, with
vllm.platforms answering "CUDA" so the tree's own vllm.tilelang_utils gives its CUDA pass
configs, and its tilelang_jit left undecorating so the kernel is compiled here for --arch.
The inputs are the kernel owner's warm-up inputs (storage-less, as vLLM's JIT warm-up uses).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
# the packages between vllm and the kernel modules, loaded bare (no __init__ runs)
_PACKAGES = ("model_executor", "model_executor/warmup", "models", "models/deepseek_v4",
             "models/deepseek_v4/nvidia", "models/deepseek_v4/nvidia/ops", "utils")


def parse_overrides(items: list[str], fields: dict[str, Any]) -> dict[str, Any]:
    """`name=value` pairs for TileConfig fields: bools as 1/0/true/false, the rest ints."""
    out: dict[str, Any] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or name not in fields:
            raise ValueError(f"--set {item!r}: expected FIELD=VALUE with FIELD one of {', '.join(fields)}")
        if fields[name].type in (bool, "bool"):
            if value.lower() not in ("1", "0", "true", "false"):
                raise ValueError(f"--set {item!r}: {name} is a bool (1/0/true/false)")
            out[name] = value.lower() in ("1", "true")
        else:
            try:
                out[name] = int(value)
            except ValueError:
                raise ValueError(f"--set {item!r}: {name} is an int") from None
    return out


def capability_of(arch: str) -> tuple[int, int]:
    """'90a' -> (9, 0), '120' -> (12, 0)."""
    digits = arch.rstrip("af")
    if not digits.isdigit() or len(digits) < 2:
        raise ValueError(f"--arch {arch!r}: expected e.g. 90a or 120")
    return int(digits[:-1]), int(digits[-1])


def _load_kernel_modules(tree: Path):
    import tilelang

    base = tree / "vllm"
    if not (base / "models/deepseek_v4/nvidia/ops/dspark_draft_attn_tilelang.py").is_file():
        raise FileNotFoundError(f"{tree}: no kernel module under it (run tools/apply.py first)")
    for name, path in [("vllm", base)] + [("vllm." + p.replace("/", "."), base / p) for p in _PACKAGES]:
        pkg = types.ModuleType(name)
        pkg.__path__ = [str(path)]
        sys.modules[name] = pkg
    # what vllm.tilelang_utils asks of the platform layer, answered as on CUDA
    platforms = types.ModuleType("vllm.platforms")
    platforms.current_platform = types.SimpleNamespace(is_cuda=lambda: True, is_rocm=lambda: False)
    import_utils = types.ModuleType("vllm.utils.import_utils")
    import_utils.has_tilelang = lambda: True
    sys.modules |= {"vllm.platforms": platforms, "vllm.utils.import_utils": import_utils}
    import vllm.tilelang_utils as utils

    utils.tilelang_jit = lambda fn: fn  # compiled in generate(), for the requested arch
    from vllm.models.deepseek_v4.nvidia.ops import dspark_draft_attn_common as dc
    from vllm.models.deepseek_v4.nvidia.ops import dspark_draft_attn_tilelang as dk

    return tilelang, utils._get_pass_configs(), dc, dk


def generate(tree: Path, arch: str, heads: int, queries: int, overrides: list[str]) -> tuple[Any, str]:
    """(the tile, the generated CUDA source) of select_tile_config's tile with overrides."""
    tilelang, pass_configs, dc, dk = _load_kernel_modules(tree)
    cap = capability_of(arch)
    cfg = dataclasses.replace(
        dc.select_tile_config(heads, queries, cap), **parse_overrides(overrides, dc.TileConfig.__dataclass_fields__)
    )
    if bad := dc.tile_rule_violations(cfg, queries):
        print(f"tile rules: {bad}", file=sys.stderr)
    owner = dk._DSPARK_DRAFT_ATTN_TILELANG_KERNEL
    key = owner.dispatch(num_heads=heads, num_queries=queries, width=dc.dspark_index_width(128, queries),
                         block_size=64, page_bytes=dc.fp8_ds_mla_page_bytes(64), scale=512**-0.5,
                         capability=cap, tile=cfg)
    _, args = type(owner).__call__.__wrapped__(owner, **owner.warmup_inputs(key))
    jit = tilelang.jit(pass_configs=pass_configs, target={"kind": "cuda", "arch": f"sm_{arch}"})(owner.kernel(key))
    return cfg, jit.compile(*args).get_kernel_source()


def ptxas_report(cu: Path, arch: str) -> str:
    """ptxas -v's register, spill and barrier lines for the generated file."""
    import tilelang

    tl = Path(tilelang.__file__).parent
    inc = [tl / "src", tl / "3rdparty/cutlass/include", tl / "3rdparty/tvm/include",
           tl / "3rdparty/tvm/ffi/include", tl / "3rdparty/tvm/3rdparty/dlpack/include"]
    cmd = ["nvcc", "-std=c++17", f"-arch=sm_{arch}", "-cubin", "-o", os.devnull, "-Xptxas", "-v", "-w",
           "--expt-relaxed-constexpr", "-DNDEBUG", *(f"-I{p}" for p in inc), str(cu)]
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    lines = [ln.strip() for ln in (res.stdout + res.stderr).splitlines()
             if "registers" in ln or "spill" in ln or "error" in ln]
    return "\n".join(lines) if lines else f"nvcc exited {res.returncode} with no ptxas report"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="90a", help="90a (SM90) or 120 (SM12x)")
    ap.add_argument("--heads", type=int, default=64)
    ap.add_argument("--queries", type=int, default=5)
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="FIELD=VALUE",
                    help="override a TileConfig field (repeatable)")
    ap.add_argument("--tree", type=Path, default=ROOT / "build/vllm")
    ap.add_argument("--out", type=Path, default=Path("dspark_draft_attn.cu"))
    ap.add_argument("--ptxas", action="store_true", help="compile with nvcc and print ptxas's report")
    a = ap.parse_args(argv)
    try:
        cfg, src = generate(a.tree, a.arch, a.heads, a.queries, a.overrides)
    except (ValueError, FileNotFoundError) as e:
        print(f"codegen: {e}", file=sys.stderr)
        return 2
    a.out.write_text(src)
    print(f"{cfg}\n{a.out}: {len(src)} bytes")
    if a.ptxas:
        if shutil.which("nvcc") is None:
            print("codegen: --ptxas needs nvcc on PATH", file=sys.stderr)
            return 2
        print(ptxas_report(a.out, a.arch))
    return 0


if __name__ == "__main__":
    sys.exit(main())
