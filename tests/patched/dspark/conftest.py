# SPDX-License-Identifier: Apache-2.0
"""Run the DSpark patches' Triton kernels on CPU through the interpreter.

Without CUDA this sets TRITON_INTERPRET=1 before vLLM's kernels are imported,
and an empty CUDA_VISIBLE_DEVICES, which makes vllm.triton_utils keep Triton
enabled when no GPU driver is active. With CUDA nothing is changed and the
kernels run on the GPU. (Same mechanism as tests/patched/block_verification.)
"""

import os

import pytest
import torch

HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")


def kernels_unavailable_reason() -> str | None:
    """Why vLLM's Triton kernels cannot run here, or None if they can."""
    if HAS_CUDA:
        return None
    try:
        from triton.runtime.interpreter import InterpretedFunction
        from vllm.v1.worker.gpu.spec_decode.dflash import speculator
    except ImportError as e:
        return f"Triton or vLLM kernels unavailable: {e}"
    if not isinstance(speculator._prepare_dflash_inputs_kernel, InterpretedFunction):
        return (
            "no CUDA, and vLLM's Triton kernels were imported before "
            "TRITON_INTERPRET=1 took effect; run this directory alone or set "
            "TRITON_INTERPRET=1 CUDA_VISIBLE_DEVICES= in the environment"
        )
    return None


@pytest.fixture
def kernel_device() -> str:
    reason = kernels_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    return "cuda" if HAS_CUDA else "cpu"
