# SPDX-License-Identifier: Apache-2.0
"""Stand-ins for the capability queries that vLLM's compiled _C library answers
at import time (w8a8_utils); this H200 has vLLM's Python package only. They say
"not supported", so the CUTLASS kernels report unavailable. Every other _C op
stays missing and fails loudly when called."""

import torch

_lib = torch.library.Library("_C", "FRAGMENT")
for _name in (
    "cutlass_scaled_mm_supports_fp8",
    "cutlass_scaled_mm_supports_block_fp8",
    "cutlass_group_gemm_supported",
):
    if not hasattr(torch.ops._C, _name):
        _lib.define(f"{_name}(int cap) -> bool")
        _lib.impl(_name, lambda cap: False, "CompositeExplicitAutograd")
