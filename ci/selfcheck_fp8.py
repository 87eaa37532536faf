#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""GPU self-check of vLLM's FP8 block-scaled GEMM backends, on DSV4-Flash shapes.

Run it on the machine that will serve, with the patched vLLM installed:

    python ci/selfcheck_fp8.py                 # DSV4-Flash shapes, human table
    python ci/selfcheck_fp8.py --json out.json # also write a JSON report
    python ci/selfcheck_fp8.py --quick         # two shapes, two batch sizes

For every block-FP8 linear kernel vLLM lists for this platform
(``_POSSIBLE_FP8_BLOCK_KERNELS``: FlashInfer+DeepGEMM, DeepGEMM, CUTLASS, B12X,
Marlin, Humming, Triton, torch on CUDA) it asks vLLM whether the kernel is
supported here, and if so builds a layer the way ``Fp8LinearMethod`` does for
a DeepSeek-V4 checkpoint (FP8 e4m3 weight, 128x128 block scales stored as
UE8M0 / ``float8_e8m0fnu``, or fp32 with ``--scales fp32``), runs the kernel's
own ``process_weights_after_loading`` and ``apply_weights``, and compares the
output with a float64 reference. It also reports which kernel vLLM would pick.

The activations are built so that FP8 quantisation is lossless (e4m3 values
times a power of two per 1x128 group, with each group's absmax at exactly
448 * 2^e): any correct backend then matches the reference to bf16 rounding,
and a wrong scale, layout or kernel shows up as a large error.

Exit status: 0 every result is correct; 1 some backend returned a wrong result
(non-finite values or error above tolerance), or the kernel vLLM would pick
failed to run; 2 nothing could be checked (no vLLM, no backend ran).
A backend that vLLM would not pick and that raises is reported, not fatal.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform as py_platform
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Protocol

import torch

BLOCK = 128
FP8_MAX = 448.0  # float8_e4m3fn

# DeepSeek-V4-Flash (hidden 4096, 64 heads x 512, q_lora_rank 1024,
# o_groups 8 x o_lora_rank 1024, shared expert 2048, indexer 64 x 128; FP8
# linear weights with 128x128 UE8M0 block scales). (N, K) of the block-FP8
# linear layers built by vllm/models/deepseek_v4 (attention.py, nvidia/model.py):
DSV4_FLASH_SHAPES: list[tuple[str, int, int]] = [
    ("attn.fused_wqa_wkv", 1024 + 512, 4096),
    ("attn.wq_b@tp2", 64 * 512 // 2, 1024),
    ("attn.wo_b@tp2", 4096, 8 * 1024 // 2),
    ("attn.wo_b@tp1", 4096, 8 * 1024),
    ("shared_expert.gate_up@tp1", 2 * 2048, 4096),
    ("shared_expert.down@tp1", 4096, 2048),
    ("indexer.wq_b", 64 * 128, 1024),
]
QUICK_SHAPES = [DSV4_FLASH_SHAPES[0], DSV4_FLASH_SHAPES[2]]
# decode (1), DSpark verify block (1 + 5 drafts), small and large batches
DEFAULT_M = [1, 6, 64, 512]
QUICK_M = [1, 64]

DEFAULT_TOL = 1e-2  # ||out - ref|| / ||ref|| in every 128-column band
DEFAULT_TOL_MAX = 5e-2  # max|out - ref| / max|ref|


# ---------------------------------------------------------------------------
# Problems and the reference
# ---------------------------------------------------------------------------


@dataclass
class Problem:
    name: str
    m: int
    n: int
    k: int
    scales: str  # "e8m0" | "fp32": how the checkpoint stores the block scales
    x: torch.Tensor  # [m, k] bf16, exactly FP8-quantisable per 1x128 group
    weight: torch.Tensor  # [n, k] float8_e4m3fn
    scale_exp: torch.Tensor  # [n/128, k/128] int32, block scale = 2^exp

    @property
    def weight_scale(self) -> torch.Tensor:
        """The block scale as the checkpoint stores it (``weight_scale_inv``)."""
        if self.scales == "e8m0":
            return (self.scale_exp + 127).to(torch.uint8).view(torch.float8_e8m0fnu)
        return torch.exp2(self.scale_exp.to(torch.float32))

    def reference(self) -> torch.Tensor:
        """x @ dequant(W)^T in float64."""
        s = torch.exp2(self.scale_exp.to(torch.float64))
        s = s.repeat_interleave(BLOCK, 0).repeat_interleave(BLOCK, 1)
        w = self.weight.to(torch.float64) * s[: self.n, : self.k]
        return self.x.to(torch.float64) @ w.t()

    def describe(self) -> dict[str, Any]:
        return {
            "shape": self.name,
            "m": self.m,
            "n": self.n,
            "k": self.k,
            "scales": self.scales,
        }


def make_problem(
    name: str,
    m: int,
    n: int,
    k: int,
    *,
    scales: str = "e8m0",
    seed: int = 0,
    device: str | torch.device = "cpu",
) -> Problem:
    if n % BLOCK or k % BLOCK:
        raise ValueError(f"N and K must be multiples of {BLOCK}: {n} x {k}")
    if scales not in ("e8m0", "fp32"):
        raise ValueError(f"scales must be e8m0 or fp32, not {scales!r}")
    g = torch.Generator().manual_seed(seed * 1_000_003 + m * 7919 + n * 31 + k)
    groups = k // BLOCK

    # Activations: e4m3 codes, a code of +-448 in every 1x128 group, times
    # 2^e per group, so amax / 448 = 2^e and x / scale is the code again.
    codes = (torch.randn(m, k, generator=g) * 64).clamp(-FP8_MAX, FP8_MAX)
    codes = codes.to(torch.float8_e4m3fn).to(torch.float32).view(m, groups, BLOCK)
    sign = torch.where(torch.rand(m, groups, generator=g) < 0.5, -1.0, 1.0)
    codes[:, :, 0] = sign * FP8_MAX
    act_exp = torch.randint(-9, -3, (m, groups, 1), generator=g).to(torch.float32)
    x = (codes * torch.exp2(act_exp)).view(m, k).to(torch.bfloat16)

    # Weight: e4m3 codes and one power-of-two scale per 128x128 block.
    w = (torch.randn(n, k, generator=g) * 64).clamp(-FP8_MAX, FP8_MAX)
    weight = w.to(torch.float8_e4m3fn)
    # Exponents within a factor of 8 of each other: every block weighs in
    # the output, so one wrong block scale shows (see Metrics.ok).
    scale_exp = torch.randint(-12, -8, (n // BLOCK, groups), generator=g)

    return Problem(
        name=name,
        m=m,
        n=n,
        k=k,
        scales=scales,
        x=x.to(device),
        weight=weight.to(device),
        scale_exp=scale_exp.to(torch.int32).to(device),
    )


@dataclass
class Metrics:
    rel_fro: float  # ||out - ref|| / ||ref|| over the whole output
    rel_band: float  # the same in the worst 128-column band (one block row of W)
    rel_max: float  # max|out - ref| / max|ref|
    max_abs: float
    nonfinite: int

    def ok(self, tol: float, tol_max: float) -> bool:
        # rel_band bounds rel_fro. In a band, one wrong 128x128 block scale of
        # a DSV4-Flash shape lifts the error from ~0.2 % (bf16 rounding) to
        # percents.
        return self.nonfinite == 0 and self.rel_band <= tol and self.rel_max <= tol_max


def compare(out: torch.Tensor, ref: torch.Tensor) -> Metrics:
    if tuple(out.shape) != tuple(ref.shape):
        raise ValueError(f"output shape {tuple(out.shape)} != {tuple(ref.shape)}")
    o = out.detach().to(torch.float64)
    r = ref.to(o.device, torch.float64)
    nonfinite = int((~torch.isfinite(o)).sum())
    diff = torch.nan_to_num(o - r, nan=float("inf"))
    ref_fro = float(torch.linalg.vector_norm(r)) or 1.0
    ref_max = float(r.abs().max()) if r.numel() else 1.0
    ref_max = ref_max or 1.0
    max_abs = float(diff.abs().max()) if diff.numel() else 0.0
    n = r.shape[-1]
    bands = -(-n // BLOCK)
    pad = bands * BLOCK - n
    d2 = torch.nn.functional.pad(diff.reshape(-1, n), (0, pad)).pow(2)
    r2 = torch.nn.functional.pad(r.reshape(-1, n), (0, pad)).pow(2)
    d_band = d2.view(-1, bands, BLOCK).sum((0, 2)).sqrt()
    r_band = r2.view(-1, bands, BLOCK).sum((0, 2)).sqrt().clamp(min=1e-300)
    return Metrics(
        rel_fro=float(torch.linalg.vector_norm(diff)) / ref_fro,
        rel_band=float((d_band / r_band).max()) if bands else 0.0,
        rel_max=max_abs / ref_max,
        max_abs=max_abs,
        nonfinite=nonfinite,
    )


# ---------------------------------------------------------------------------
# Backends
# ---------------------------------------------------------------------------


class Backend(Protocol):
    name: str

    def probe(self, problem: Problem) -> str | None:
        """None if this backend can run ``problem`` here, else why not."""

    def run(self, problem: Problem) -> torch.Tensor:
        """The backend's [m, n] output for ``problem``."""


class VllmKernelBackend:
    """One of vLLM's block-FP8 linear kernels, driven as Fp8LinearMethod does."""

    def __init__(self, kernel_cls: type, api: SimpleNamespace) -> None:
        self.kernel_cls = kernel_cls
        self.name = kernel_cls.__name__
        self.api = api

    def _config(self, problem: Problem) -> Any:
        return layer_config(self.api, problem.n, problem.k)

    def probe(self, problem: Problem) -> str | None:
        ok, reason = self.api.is_supported_and_can_implement_kernel(
            self.kernel_cls, self._config(problem), None
        )
        return None if ok else (reason.strip() or "not supported")

    def run(self, problem: Problem) -> torch.Tensor:
        api = self.api
        kernel = api.init_fp8_linear_kernel(
            activation_quant_key=api.activation_quant_key,
            weight_quant_key=api.weight_quant_key,
            input_dtype=torch.bfloat16,
            out_dtype=torch.bfloat16,
            weight_shape=(problem.n, problem.k),
            force_kernel=self.kernel_cls,
        )
        if type(kernel) is not self.kernel_cls:
            raise RuntimeError(
                f"vLLM built {type(kernel).__name__} instead of {self.name}"
            )
        layer = build_layer(problem)
        kernel.process_weights_after_loading(layer)
        out = kernel.apply_weights(layer, problem.x)
        if out.is_cuda:
            torch.cuda.synchronize(out.device)
        return out


def build_layer(problem: Problem) -> torch.nn.Module:
    """The parameters Fp8LinearMethod.create_weights registers for a
    block-quantised layer (before process_weights_after_loading)."""
    layer = torch.nn.Module()
    weight = problem.weight.clone()
    scale = problem.weight_scale.clone()
    layer.register_parameter("weight", torch.nn.Parameter(weight, requires_grad=False))
    layer.register_parameter(
        "weight_scale_inv", torch.nn.Parameter(scale, requires_grad=False)
    )
    layer.logical_widths = [problem.n]
    layer.input_size_per_partition = problem.k
    layer.output_size_per_partition = problem.n
    layer.orig_dtype = torch.bfloat16
    layer.weight_block_size = [BLOCK, BLOCK]
    layer.input_scale = None  # dynamic activation scales
    return layer


def layer_config(api: SimpleNamespace, n: int, k: int) -> Any:
    return api.FP8ScaledMMLinearLayerConfig(
        weight_quant_key=api.weight_quant_key,
        activation_quant_key=api.activation_quant_key,
        weight_shape=(n, k),
        input_dtype=torch.bfloat16,
        out_dtype=torch.bfloat16,
    )


def load_vllm_api() -> SimpleNamespace:
    """vLLM's kernel-selection entry points, as Fp8LinearMethod uses them."""
    from vllm.model_executor.kernels import linear as L
    from vllm.model_executor.kernels.linear.scaled_mm.ScaledMMLinearKernel import (
        FP8ScaledMMLinearLayerConfig,
    )
    from vllm.model_executor.layers.quantization.utils.quant_utils import (
        GroupShape,
        create_fp8_quant_key,
    )
    from vllm.platforms import current_platform

    return SimpleNamespace(
        platform=current_platform,
        kernels=list(L._POSSIBLE_FP8_BLOCK_KERNELS.get(current_platform._enum, [])),
        possible=L._POSSIBLE_FP8_BLOCK_KERNELS,
        choose=L.choose_scaled_mm_linear_kernel,
        init_fp8_linear_kernel=L.init_fp8_linear_kernel,
        is_supported_and_can_implement_kernel=L.is_supported_and_can_implement_kernel,
        FP8ScaledMMLinearLayerConfig=FP8ScaledMMLinearLayerConfig,
        weight_quant_key=create_fp8_quant_key(
            static=True, group_shape=GroupShape(BLOCK, BLOCK)
        ),
        activation_quant_key=create_fp8_quant_key(
            static=False, group_shape=GroupShape(1, BLOCK)
        ),
    )


@contextlib.contextmanager
def vllm_context(model_type: str) -> Iterator[None]:
    """A current VllmConfig (the kernels build custom ops that read it) whose
    model reports ``model_type``: DeepGEMM's linear kernel declines to run
    for models it is auto-disabled on, and needs a model config to decide."""
    from vllm.config import VllmConfig, set_current_vllm_config

    config = VllmConfig()
    object.__setattr__(
        config,
        "model_config",
        SimpleNamespace(
            hf_text_config=SimpleNamespace(model_type=model_type),
            hf_config=SimpleNamespace(model_type=model_type),
            dtype=torch.bfloat16,
        ),
    )
    with set_current_vllm_config(config):
        yield


def vllm_pick(api: SimpleNamespace, n: int, k: int) -> str:
    try:
        chosen = api.choose(
            config=layer_config(api, n, k),
            possible_kernels=api.possible,
            quantization="fp8_block_w8a8",
        )
    except ValueError as e:
        return "none: " + " ".join(str(e).split())
    return chosen.__name__


# ---------------------------------------------------------------------------
# The check
# ---------------------------------------------------------------------------


@dataclass
class Case:
    name: str
    n: int
    k: int
    m: int
    scales: str


def cases_for(
    shapes: Sequence[tuple[str, int, int]], ms: Sequence[int], scales: Sequence[str]
) -> list[Case]:
    return [Case(name, n, k, m, s) for s in scales for name, n, k in shapes for m in ms]


@dataclass
class Report:
    environment: dict[str, Any] = field(default_factory=dict)
    vllm_pick: dict[str, str] = field(default_factory=dict)
    backends: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    verdict: str = "incomplete"
    exit_code: int = 2

    def to_json(self) -> dict[str, Any]:
        return {
            "tool": "selfcheck_fp8",
            "format": 1,
            "environment": self.environment,
            "vllm_pick": self.vllm_pick,
            "backends": self.backends,
            "problems": self.problems,
            "verdict": self.verdict,
            "exit_code": self.exit_code,
        }


def run_checks(
    backends: Sequence[Backend],
    cases: Sequence[Case],
    *,
    picked: dict[str, str] | None = None,
    device: str | torch.device = "cpu",
    seed: int = 0,
    tol: float = DEFAULT_TOL,
    tol_max: float = DEFAULT_TOL_MAX,
    log: Callable[[str], None] = lambda s: None,
) -> Report:
    """Run every backend on every case; ``picked`` maps a shape name to the
    kernel name vLLM would select for it."""
    report = Report(vllm_pick=dict(picked or {}))
    entries = {b.name: {"name": b.name, "results": []} for b in backends}
    for case in cases:
        problem = make_problem(
            case.name,
            case.m,
            case.n,
            case.k,
            scales=case.scales,
            seed=seed,
            device=device,
        )
        ref = problem.reference()
        for backend in backends:
            result: dict[str, Any] = problem.describe()
            try:
                reason = backend.probe(problem)
            except Exception as e:  # noqa: BLE001 - a probe that raises: unavailable
                reason = f"probe raised {type(e).__name__}: {e}"
            if reason is not None:
                result.update(status="unavailable", reason=reason)
            else:
                start = time.perf_counter()
                try:
                    out = backend.run(problem)
                    metrics = compare(out, ref)
                except Exception as e:  # noqa: BLE001 - any failure is reported
                    result.update(
                        status="error",
                        error=" ".join(f"{type(e).__name__}: {e}".split()),
                        traceback=traceback.format_exc(limit=6),
                    )
                else:
                    good = metrics.ok(tol, tol_max)
                    result.update(
                        status="ok" if good else "wrong",
                        rel_fro=metrics.rel_fro,
                        rel_band=metrics.rel_band,
                        rel_max=metrics.rel_max,
                        max_abs=metrics.max_abs,
                        nonfinite=metrics.nonfinite,
                    )
                result["seconds"] = round(time.perf_counter() - start, 4)
            entries[backend.name]["results"].append(result)
            log(_format_result(backend.name, result))
        del ref, problem

    for backend in backends:
        entry = entries[backend.name]
        results = entry["results"]
        statuses = {r["status"] for r in results}
        picked_for = sorted(s for s, k in report.vllm_pick.items() if k == backend.name)
        entry["picked_by_vllm_for"] = picked_for
        if statuses <= {"unavailable"}:
            reasons = sorted({r["reason"] for r in results})
            entry["status"] = "unavailable"
            entry["reason"] = "; ".join(reasons)
        else:
            entry["status"] = "ran"
            ran = [r for r in results if r["status"] != "unavailable"]
            entry["worst_rel_band"] = max(
                (r["rel_band"] for r in ran if "rel_band" in r), default=None
            )
            entry["counts"] = {
                s: sum(r["status"] == s for r in results)
                for s in ("ok", "wrong", "error", "unavailable")
            }
        report.backends.append(entry)

    return finish(report, tol=tol, tol_max=tol_max)


def finish(report: Report, *, tol: float, tol_max: float) -> Report:
    """The verdict and exit status from the per-backend results."""
    wrong: list[str] = []
    pick_failed: list[str] = []
    produced = False  # some backend returned an output to compare
    for entry in report.backends:
        picked_for = entry.get("picked_by_vllm_for", [])
        for r in entry["results"]:
            if r["status"] in ("ok", "wrong"):
                produced = True
            where = f"{entry['name']} {r['shape']} m={r['m']} scales={r['scales']}"
            if r["status"] == "wrong":
                wrong.append(
                    f"WRONG: {where}: rel_band={r['rel_band']:.3g} "
                    f"rel_max={r['rel_max']:.3g} nonfinite={r['nonfinite']} "
                    f"(tolerance {tol:g} / {tol_max:g})"
                )
            elif r["status"] == "error" and r["shape"] in picked_for:
                pick_failed.append(f"FAILED (vLLM's pick): {where}: {r['error']}")
    no_kernel = [
        f"vLLM has no kernel for {shape}: {pick}"
        for shape, pick in report.vllm_pick.items()
        if pick.startswith("none")
    ]
    if wrong or pick_failed:
        report.verdict, report.exit_code = "fail", 1
    elif not produced:
        report.verdict, report.exit_code = "incomplete", 2
        no_kernel.append("no backend produced a result on this machine")
    elif no_kernel:
        report.verdict, report.exit_code = "fail", 1
    else:
        report.verdict, report.exit_code = "pass", 0
    report.problems = wrong + pick_failed + no_kernel
    return report


def _format_result(name: str, r: dict[str, Any]) -> str:
    head = f"{name:<46} {r['shape']:<26} m={r['m']:<5} {r['scales']:<5}"
    if r["status"] in ("ok", "wrong"):
        return (
            f"{head} {r['status'].upper():<6} rel_band={r['rel_band']:.2e} "
            f"rel_max={r['rel_max']:.2e} nonfinite={r['nonfinite']}"
        )
    if r["status"] == "error":
        return f"{head} ERROR  {r['error'][:160]}"
    return f"{head} unavailable: {r['reason'][:160]}"


def environment(api: SimpleNamespace | None) -> dict[str, Any]:
    env: dict[str, Any] = {
        "python": py_platform.python_version(),
        "torch": torch.__version__,
        "cuda_available": torch.cuda.is_available(),
        "env": {
            k: v
            for k, v in sorted(os.environ.items())
            if k.startswith(("VLLM_USE_DEEP_GEMM", "VLLM_DEEP_GEMM", "VLLM_DISABLED"))
            or k in ("VLLM_BLOCKSCALE_FP8_GEMM_FLASHINFER", "VLLM_BATCH_INVARIANT")
        },
    }
    if torch.cuda.is_available():
        env["device"] = torch.cuda.get_device_name()
        major, minor = torch.cuda.get_device_capability()
        env["capability"] = f"{major}.{minor}"
    for module in ("triton", "vllm"):
        mod = sys.modules.get(module)
        if mod is not None:
            env[module] = getattr(mod, "__version__", "unknown")
    if api is not None:
        env["platform"] = type(api.platform).__name__
        env["kernels_listed"] = [k.__name__ for k in api.kernels]
    return env


# ---------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------


def _int_list(text: str) -> list[int]:
    return [int(t) for t in text.split(",") if t.strip()]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Check vLLM's FP8 block-scaled GEMM backends on this GPU "
        "against a float reference (DeepSeek-V4-Flash shapes).",
    )
    p.add_argument(
        "--json", metavar="PATH", help="write the JSON report here ('-': stdout)"
    )
    p.add_argument("--quick", action="store_true", help="two shapes, m in {1, 64}")
    p.add_argument("--m", type=_int_list, help="batch sizes, e.g. 1,6,64,512")
    p.add_argument(
        "--scales",
        default="e8m0,fp32",
        help="block-scale storage to test: e8m0 (DSV4-Flash), fp32 (DSV4-Flash-Base)",
    )
    p.add_argument(
        "--backend",
        action="append",
        default=[],
        help="only these kernels (class names; repeatable)",
    )
    p.add_argument("--model-type", default="deepseek_v4")
    p.add_argument("--tol", type=float, default=DEFAULT_TOL)
    p.add_argument("--tol-max", type=float, default=DEFAULT_TOL_MAX)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default=None, help="default: cuda if present, else cpu")
    return p.parse_args(argv)


def main(
    argv: Sequence[str] | None = None,
    *,
    backends: Sequence[Backend] | None = None,
    picked: dict[str, str] | None = None,
) -> int:
    """``backends``/``picked`` replace vLLM's kernels (for tests)."""
    args = parse_args(argv)
    to_stdout = args.json == "-"
    out = sys.stderr if to_stdout else sys.stdout

    def log(line: str) -> None:
        print(line, file=out, flush=True)

    shapes = QUICK_SHAPES if args.quick else DSV4_FLASH_SHAPES
    ms = args.m or (QUICK_M if args.quick else DEFAULT_M)
    scales = [s.strip() for s in args.scales.split(",") if s.strip()]
    cases = cases_for(shapes, ms, scales)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")

    api = None
    setup_error = None
    context: contextlib.AbstractContextManager = contextlib.nullcontext()
    if backends is None:
        try:
            api = load_vllm_api()
            context = vllm_context(args.model_type)
            context.__enter__()
        except Exception as e:  # noqa: BLE001 - no usable vLLM: report, exit 2
            setup_error = f"cannot set up vLLM here: {type(e).__name__}: {e}"
            context = contextlib.nullcontext()
        if api is not None and setup_error is None:
            backends = [VllmKernelBackend(k, api) for k in api.kernels]
            picked = {name: vllm_pick(api, n, k) for name, n, k in shapes}
        else:
            backends = []
    if args.backend:
        backends = [b for b in backends if b.name in set(args.backend)]

    try:
        if setup_error is not None:
            report = Report(problems=[setup_error])
        else:
            log(f"device: {device}; {len(backends)} backends; {len(cases)} cases")
            for shape, pick in (picked or {}).items():
                log(f"vLLM would pick for {shape}: {pick}")
            report = run_checks(
                backends,
                cases,
                picked=picked,
                device=device,
                seed=args.seed,
                tol=args.tol,
                tol_max=args.tol_max,
                log=log,
            )
    finally:
        context.__exit__(None, None, None)
    report.environment = environment(api)
    report.environment["device_used"] = str(device)

    log("")
    for entry in report.backends:
        if entry["status"] == "unavailable":
            log(f"{entry['name']}: unavailable: {entry['reason']}")
        else:
            c = entry["counts"]
            log(
                f"{entry['name']}: ok={c['ok']} wrong={c['wrong']} error={c['error']} "
                f"unavailable={c['unavailable']} worst rel_band={entry['worst_rel_band']}"
            )
    for p in report.problems:
        log(p)
    log(f"verdict: {report.verdict} (exit {report.exit_code})")

    if args.json:
        text = json.dumps(report.to_json(), indent=2, default=str)
        if to_stdout:
            print(text)
        else:
            with open(args.json, "w") as f:
                f.write(text + "\n")
    return report.exit_code


if __name__ == "__main__":
    sys.exit(main())
