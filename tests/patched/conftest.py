# SPDX-License-Identifier: Apache-2.0
"""Run the patched tree's Triton kernels (rejection sampler, DSpark prep) on CPU
through the interpreter; shared by every group's tests under tests/patched.

Without CUDA this sets TRITON_INTERPRET=1 before vLLM's kernels are imported,
and an empty CUDA_VISIBLE_DEVICES, which makes vllm.triton_utils keep Triton
enabled when no GPU driver is active (its check for distributed workers).
libdevice.log1p is only a stub under the interpreter; map it to log(1 + x).
With CUDA nothing is changed and the kernels run on the GPU.
"""

import os

import pytest
import torch

HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

try:
    import triton.language as tl
    import triton.language.extra.libdevice as libdevice
except ImportError:  # pragma: no cover - no Triton at all
    tl = None

if tl is not None and os.environ.get("TRITON_INTERPRET") == "1":

    def _interpreter_log1p(x):
        return tl.log(1.0 + x)

    libdevice.log1p = _interpreter_log1p


def kernels_unavailable_reason() -> str | None:
    """Why the Triton kernels cannot run here, or None if they can."""
    if HAS_CUDA:
        return None
    try:
        from triton.runtime.interpreter import InterpretedFunction
        from vllm.v1.worker.gpu.spec_decode import rejection_sampler_utils as rsu
    except ImportError as e:
        return f"Triton or vLLM kernels unavailable: {e}"
    if not isinstance(rsu._rejection_kernel, InterpretedFunction):
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
