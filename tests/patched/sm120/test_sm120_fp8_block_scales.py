# SPDX-License-Identifier: Apache-2.0
"""E8M0 weight scales on the block-FP8 linear kernels (patch sm120/0001), and
block-FP8 kernel selection on a simulated SM12x device, where DeepGEMM's FP8
linear GEMM is opt-in on SM121 (patch sm120/0002).

CPU only: the kernels are instantiated and their weight processing is run, but
no GEMM is launched. The GPU platform is simulated by swapping vLLM's
``current_platform`` for a CUDA platform that reports compute capability 12.x.
"""

import sys
from types import SimpleNamespace

import pytest
import torch
from vllm import triton_utils
from vllm.config import VllmConfig, set_current_vllm_config
from vllm.model_executor.kernels import linear as linear_kernels
from vllm.model_executor.kernels.linear.scaled_mm import b12x as b12x_mod
from vllm.model_executor.kernels.linear.scaled_mm import cutlass as cutlass_mod
from vllm.model_executor.kernels.linear.scaled_mm import deep_gemm as deep_gemm_mod
from vllm.model_executor.kernels.linear.scaled_mm.b12x import (
    B12xFp8BlockScaledMMKernel,
)
from vllm.model_executor.kernels.linear.scaled_mm.cutlass import (
    CutlassFp8BlockScaledMMKernel,
)
from vllm.model_executor.kernels.linear.scaled_mm.ScaledMMLinearKernel import (
    FP8ScaledMMLinearLayerConfig,
)
from vllm.model_executor.layers.quantization.utils.quant_utils import (
    GroupShape,
    create_fp8_quant_key,
)
from vllm.platforms import PlatformEnum
from vllm.platforms.interface import DeviceCapability, Platform

BLOCK = 128
N, K = 512, 384  # 4 x 3 blocks of 128 x 128

# Every finite E8M0 byte except 0 (2^-127, a float32 subnormal) and 255 (NaN).
E8M0_BYTES = torch.arange(1, 255, dtype=torch.uint8)


@pytest.fixture(autouse=True)
def _vllm_config(monkeypatch):
    # The kernels build QuantFP8 custom ops, which read the current config.
    # A default VllmConfig on an x86 CPU without triton-cpu refuses to build
    # (CpuPlatform.check_and_update_config); nothing here runs Triton.
    with monkeypatch.context() as m:
        m.setattr(triton_utils, "HAS_TRITON", True)
        config = VllmConfig()
    with set_current_vllm_config(config):
        yield


def _config(n: int = N, k: int = K) -> FP8ScaledMMLinearLayerConfig:
    return FP8ScaledMMLinearLayerConfig(
        weight_quant_key=create_fp8_quant_key(
            static=True, group_shape=GroupShape(BLOCK, BLOCK)
        ),
        activation_quant_key=create_fp8_quant_key(
            static=False, group_shape=GroupShape(1, BLOCK)
        ),
        weight_shape=(n, k),
        input_dtype=torch.bfloat16,
        out_dtype=torch.bfloat16,
    )


def _scale_bytes() -> torch.Tensor:
    # Cycle through all finite exponents so every byte value is checked.
    numel = (N // BLOCK) * (K // BLOCK)
    idx = torch.arange(numel * 22) % E8M0_BYTES.numel()
    return E8M0_BYTES[idx].view(-1, numel)  # several [rows, cols] scale grids


def _layer(scale: torch.Tensor, scale_name: str) -> torch.nn.Module:
    layer = torch.nn.Module()
    weight = torch.randn(N, K).clamp(-4, 4).to(torch.float8_e4m3fn)
    layer.register_parameter("weight", torch.nn.Parameter(weight, requires_grad=False))
    layer.register_parameter(scale_name, torch.nn.Parameter(scale, requires_grad=False))
    layer.input_scale = None
    layer.weight_block_size = [BLOCK, BLOCK]
    return layer


def _scale_of(layer: torch.nn.Module, scale_name: str) -> torch.Tensor:
    return getattr(layer, scale_name).data


KERNELS = [CutlassFp8BlockScaledMMKernel, B12xFp8BlockScaledMMKernel]


@pytest.mark.parametrize("kernel_cls", KERNELS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("scale_name", ["weight_scale_inv", "weight_scale"])
@pytest.mark.parametrize("storage", ["e8m0", "uint8"])
def test_e8m0_block_scales_become_exact_fp32(kernel_cls, scale_name, storage):
    """E8M0 (or its raw uint8 bytes) turns into fp32 2^(byte - 127), exactly."""
    for row in _scale_bytes():
        raw = row.view(N // BLOCK, K // BLOCK).clone()
        scale = raw.view(torch.float8_e8m0fnu) if storage == "e8m0" else raw
        layer = _layer(scale, scale_name)
        kernel_cls(_config()).process_weights_after_loading(layer)

        out = _scale_of(layer, scale_name)
        assert out.dtype == torch.float32
        assert out.is_contiguous()
        expected = torch.exp2(raw.to(torch.float64) - 127).to(torch.float32)
        assert torch.equal(out, expected)
        # The same values torch's own E8M0 -> fp32 conversion gives.
        assert torch.equal(out, raw.view(torch.float8_e8m0fnu).to(torch.float32))
        # Exact powers of two: the mantissa bits are all zero.
        assert torch.all(out.view(torch.int32) & 0x007FFFFF == 0)


@pytest.mark.parametrize("kernel_cls", KERNELS, ids=lambda c: c.__name__)
def test_fp32_block_scales_are_left_alone(kernel_cls):
    scale = torch.rand(N // BLOCK, K // BLOCK, dtype=torch.float32) + 0.5
    layer = _layer(scale.clone(), "weight_scale_inv")
    kernel_cls(_config()).process_weights_after_loading(layer)
    out = _scale_of(layer, "weight_scale_inv")
    assert out.dtype == torch.float32
    assert torch.equal(out, scale)


def test_cutlass_and_b12x_share_one_upcast():
    """One helper on the common base class, not a copy per kernel."""
    helper = CutlassFp8BlockScaledMMKernel._upcast_e8m0_block_scale
    assert B12xFp8BlockScaledMMKernel._upcast_e8m0_block_scale is helper


# ---------------------------------------------------------------------------
# Kernel selection on a simulated SM12x device
# ---------------------------------------------------------------------------


def _fake_cuda_platform(major: int, minor: int) -> Platform:
    class _FakeSM12x(Platform):
        _enum = PlatformEnum.CUDA
        device_name = "cuda"
        device_type = "cuda"
        dispatch_key = "CUDA"

        @classmethod
        def get_device_capability(cls, device_id: int = 0) -> DeviceCapability:
            return DeviceCapability(major=major, minor=minor)

        @classmethod
        def get_device_name(cls, device_id: int = 0) -> str:
            return f"simulated sm_{major}{minor}"

    return _FakeSM12x()


@pytest.fixture
def sm12x(monkeypatch):
    """Simulate an SM12x GPU; the test sets DeepGEMM/B12X availability."""

    def install(minor: int, deep_gemm: bool, b12x: bool = False) -> None:
        fake = _fake_cuda_platform(12, minor)
        original = linear_kernels.current_platform
        for module in list(sys.modules.values()):
            if module is None or not module.__name__.startswith("vllm"):
                continue
            if getattr(module, "current_platform", None) is original:
                monkeypatch.setattr(module, "current_platform", fake)
        # The CUTLASS blockwise kernels are built for SM120 with CUDA >= 12.8
        # (csrc/.../scaled_mm_entry.cu cutlass_scaled_mm_supports_block_fp8).
        monkeypatch.setattr(cutlass_mod, "CUTLASS_BLOCK_FP8_SUPPORTED", True)
        # DeepGEMM availability (VLLM_USE_DEEP_GEMM, the package, nvcc).
        monkeypatch.setattr(deep_gemm_mod, "is_deep_gemm_supported", lambda: deep_gemm)
        monkeypatch.setattr(
            deep_gemm_mod,
            "should_use_deepgemm_for_fp8_linear",
            lambda out_dtype, weight_shape: deep_gemm,
        )
        model_config = SimpleNamespace(
            hf_text_config=SimpleNamespace(model_type="deepseek_v4")
        )
        monkeypatch.setattr(
            deep_gemm_mod,
            "get_current_vllm_config",
            lambda: SimpleNamespace(model_config=model_config),
        )
        blockscaled = SimpleNamespace(is_supported=lambda: True) if b12x else None
        monkeypatch.setattr(b12x_mod, "_import_b12x_blockscaled", lambda: blockscaled)

    return install


def _choose() -> type:
    return linear_kernels.choose_scaled_mm_linear_kernel(
        config=_config(),
        possible_kernels=linear_kernels._POSSIBLE_FP8_BLOCK_KERNELS,
        quantization="fp8_block_w8a8",
    )


def test_selection_sm120_deep_gemm_on(sm12x, monkeypatch):
    monkeypatch.delenv("VLLM_DEEP_GEMM_FP8_LINEAR_SM121", raising=False)
    sm12x(0, deep_gemm=True)
    assert _choose() is deep_gemm_mod.DeepGemmFp8BlockScaledMMKernel


def test_selection_sm121_deep_gemm_is_opt_in(sm12x, monkeypatch):
    """Patch sm120/0002: on SM121 (GB10) DeepGEMM's FP8 linear GEMM needs
    VLLM_DEEP_GEMM_FP8_LINEAR_SM121=1; without it CUTLASS is chosen."""
    sm12x(1, deep_gemm=True)
    monkeypatch.delenv("VLLM_DEEP_GEMM_FP8_LINEAR_SM121", raising=False)
    assert _choose() is CutlassFp8BlockScaledMMKernel
    supported, reason = deep_gemm_mod.DeepGemmFp8BlockScaledMMKernel.is_supported()
    assert not supported
    assert "VLLM_DEEP_GEMM_FP8_LINEAR_SM121=1" in reason

    monkeypatch.setenv("VLLM_DEEP_GEMM_FP8_LINEAR_SM121", "1")
    assert _choose() is deep_gemm_mod.DeepGemmFp8BlockScaledMMKernel

    monkeypatch.setenv("VLLM_DEEP_GEMM_FP8_LINEAR_SM121", "0")
    assert _choose() is CutlassFp8BlockScaledMMKernel


@pytest.mark.parametrize("minor", [0, 1])
@pytest.mark.parametrize("b12x", [False, True])
def test_selection_sm12x_deep_gemm_off_picks_cutlass(sm12x, minor, b12x):
    """With DeepGEMM off, CUTLASS is chosen ahead of B12X, so it is the kernel
    that receives a DeepSeek-V4 checkpoint's E8M0 scales."""
    sm12x(minor, deep_gemm=False, b12x=b12x)
    kernel_cls = _choose()
    assert kernel_cls is CutlassFp8BlockScaledMMKernel

    raw = torch.randint(100, 130, (N // BLOCK, K // BLOCK), dtype=torch.uint8)
    layer = _layer(raw.view(torch.float8_e8m0fnu), "weight_scale_inv")
    kernel_cls(_config()).process_weights_after_loading(layer)
    # dispatch_scaled_mm (c3x/scaled_mm_helper.hpp) takes fp32 scales only.
    assert _scale_of(layer, "weight_scale_inv").dtype == torch.float32


def test_selection_sm12x_no_deep_gemm_no_cutlass(sm12x, monkeypatch):
    sm12x(0, deep_gemm=False, b12x=True)
    monkeypatch.setattr(cutlass_mod, "CUTLASS_BLOCK_FP8_SUPPORTED", False)
    assert _choose() is B12xFp8BlockScaledMMKernel

    sm12x(0, deep_gemm=False, b12x=False)
    monkeypatch.setattr(cutlass_mod, "CUTLASS_BLOCK_FP8_SUPPORTED", False)
    chosen = _choose()
    # Marlin (weight-only, cc >= 7.5) comes next unless Humming is installed
    # and preferred; the Triton kernel is the last CUDA fallback.
    assert chosen.__name__ in (
        "MarlinFP8ScaledMMLinearKernel",
        "HummingFP8ScaledMMLinearKernel",
    )
