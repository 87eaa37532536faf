# SPDX-License-Identifier: Apache-2.0
"""How many thread-block clusters of each size a GPU runs at once, one CTA an SM: the CUDA
driver's cuOccupancyMaxActiveClusters, asked about a small Triton kernel launched with enough
dynamic shared memory that one CTA fills an SM (as the split draft-attention CTAs do, 133-182 KB).
The split launch rule's estimate (dspark_draft_attn_common.co_resident_clusters) is checked
against it; torch exposes no such query, so the library keeps the estimate.

  python -m benchmarks.dspark_draft_attn.cluster_capacity   # prints {size: clusters}
"""

from __future__ import annotations

import ctypes
import json

# cuda.h: CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
_CLUSTER_DIMENSION = 4
_MAX_DYNAMIC_SHARED = 8


class _ClusterDim(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


class _AttrValue(ctypes.Union):
    _fields_ = [("pad", ctypes.c_char * 64), ("clusterDim", _ClusterDim)]


class LaunchAttribute(ctypes.Structure):
    """CUlaunchAttribute: an enum id padded to 8 bytes, then a 64-byte value union."""

    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", _AttrValue)]


class LaunchConfig(ctypes.Structure):
    """CUlaunchConfig (cuda.h, CUDA 12+)."""

    _fields_ = [
        ("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
        ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
        ("sharedMemBytes", ctypes.c_uint),
        ("hStream", ctypes.c_void_p),
        ("attrs", ctypes.POINTER(LaunchAttribute)),
        ("numAttrs", ctypes.c_uint),
    ]


def launch_config(cluster_size: int, threads: int, smem_bytes: int) -> tuple[LaunchConfig, LaunchAttribute]:
    """A launch of many clusters of cluster_size x 1 x 1 CTAs (the attribute is returned too:
    the config points at it)."""
    attr = LaunchAttribute(id=_CLUSTER_DIMENSION)
    attr.value.clusterDim = _ClusterDim(cluster_size, 1, 1)
    cfg = LaunchConfig(gridDimX=cluster_size * 1024, gridDimY=1, gridDimZ=1, blockDimX=threads, blockDimY=1,
                       blockDimZ=1, sharedMemBytes=smem_bytes, hStream=None, attrs=ctypes.pointer(attr), numAttrs=1)
    return cfg, attr


def _probe_function(threads: int) -> int:
    """The CUfunction handle of a trivial Triton kernel (launched once so its module loads)."""
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def _touch(x_ptr):
        tl.store(x_ptr + tl.program_id(0), 1)

    x = torch.zeros(1, dtype=torch.int32, device="cuda")
    compiled = _touch[(1,)](x, num_warps=threads // 32)
    torch.cuda.synchronize()
    return int(compiled.function)


def max_active_clusters(sizes=range(1, 9), threads: int = 256, smem_bytes: int = 140 * 1024) -> dict[int, int]:
    """{cluster size: clusters of it resident at once} on the current CUDA device."""
    lib = ctypes.CDLL("libcuda.so.1")
    func = ctypes.c_void_p(_probe_function(threads))

    def check(rc: int, what: str) -> None:
        if rc != 0:
            raise RuntimeError(f"{what} failed: CUresult {rc}")

    check(lib.cuFuncSetAttribute(func, _MAX_DYNAMIC_SHARED, ctypes.c_int(smem_bytes)), "cuFuncSetAttribute")
    out = {}
    for size in sizes:
        cfg, _attr = launch_config(size, threads, smem_bytes)
        n = ctypes.c_int(0)
        check(lib.cuOccupancyMaxActiveClusters(ctypes.byref(n), func, ctypes.byref(cfg)),
              f"cuOccupancyMaxActiveClusters(cluster {size})")
        out[size] = n.value
    return out


if __name__ == "__main__":
    print(json.dumps(max_active_clusters()))
