# SPDX-License-Identifier: Apache-2.0
"""The bulk gather's dequantisation (gather="bulk" of the KV-resident kernel) against the fp32
reference's, bit for bit, on the CPU.

The kernel imports its C++ helpers as source (`_BULK_SOURCE`: where a slot's staged record lies,
and `dspark_dequant16`, 16 bytes of a resident row from it). Their conversions (`cuda_fp8.h`,
`cuda_fp16.h`, `cuda_bf16.h`) are host functions too, so nvcc builds that very text into a host
program here: the only change is `__host__` beside `__device__` on the two helpers and the bit
copy of `__uint_as_float` (a device intrinsic). Every e4m3 code meets every UE8M0 scale byte,
records are staged across both of the kernel's buffers (Q's and the first resident tile's), and
dead slots must come out zero.

The arithmetic is the device's: IEEE fp32 products rounded to nearest, no flush to zero
(TileLang passes nvcc --use_fast_math only when its TL_ENABLE_FAST_MATH pass config asks, and
vLLM's pass configs do not). What this cannot see: the bulk copies, the mbarrier, the records'
addresses in the cache and the swizzled destinations (TileLang's side); the GPU test compares the
two gathers' outputs bitwise for those. Needs nvcc (the CUDA toolkit); no GPU.
"""

import ast
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
import vllm
from vllm.models.deepseek_v4.nvidia.ops import dspark_draft_attn_common as dc

RESIDENT = Path(vllm.__file__).parent / "models/deepseek_v4/nvidia/ops/dspark_draft_attn_resident.py"
NVCC = shutil.which("nvcc")
BLOCK_SIZE = 64
PAGE = dc.fp8_ds_mla_page_bytes(BLOCK_SIZE)
# records staged in Q's buffer, as _gather_bulk counts them for the resident tile of 16 heads x
# 4 queries (64 bf16 rows of 512): 113; the rest go to the first resident tile
IN_Q = 64 * dc.HEAD_DIM * 2 // dc.TOKEN_DATA_BYTES

# the two helpers made callable from the host; each must be found, or the kernel changed under us
_HOST_EDITS = (
    ("__device__ __forceinline__ unsigned char *dspark_staged(",
     "__host__ __device__ __forceinline__ unsigned char *dspark_staged("),
    ("__device__ __forceinline__ void dspark_dequant16(",
     "__host__ __device__ __forceinline__ void dspark_dequant16("),
)  # fmt: skip

_PRELUDE = r"""
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <cuda_runtime.h>
// __uint_as_float is a device intrinsic: the host's bit copy in its place
static inline __host__ __device__ float dspark_bits_as_float(unsigned u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}
#define __uint_as_float dspark_bits_as_float
"""

_MAIN = r"""
// in: n records (576 B), n scale words (8 B), n live flags (1 B); out: n rows of 512 bf16
int main(int argc, char **argv) {
  if (argc != 5) return 2;
  const int n = atoi(argv[3]), in_q = atoi(argv[4]);
  std::vector<unsigned char> rec(n * 576), live(n);
  std::vector<long long> word(n);
  FILE *in = fopen(argv[1], "rb");
  if (!in || fread(rec.data(), 1, rec.size(), in) != rec.size() ||
      fread(word.data(), 8, n, in) != (size_t)n ||
      fread(live.data(), 1, n, in) != (size_t)n)
    return 3;
  fclose(in);
  // staged as the kernel stages them: the first in_q in Q's buffer, the rest in kv_s[0]
  // (one record more of each, 0xCD: a read past a buffer's records shows up)
  std::vector<unsigned char> q_s((in_q + 1) * 576, 0xCD), kv_s0((n - in_q + 1) * 576, 0xCD);
  for (int j = 0; j < n; ++j)
    memcpy(j < in_q ? &q_s[j * 576] : &kv_s0[(j - in_q) * 576], &rec[j * 576], 576);
  // 0xAB everywhere first: a chunk the helper does not write shows up
  std::vector<uint4> out(n * 64);
  memset(out.data(), 0xAB, out.size() * sizeof(uint4));
  for (int j = 0; j < n; ++j)
    for (int c = 0; c < 64; ++c)
      dspark_dequant16(&out[j * 64 + c], q_s.data(), kv_s0.data(), in_q, j, c, word[j], live[j] != 0);
  FILE *o = fopen(argv[2], "wb");
  if (!o || fwrite(out.data(), sizeof(uint4), out.size(), o) != out.size()) return 4;
  fclose(o);
  return 0;
}
"""


def _bulk_source() -> str:
    """The kernel module's _BULK_SOURCE string, read from the tree (not imported: the module
    needs tilelang)."""
    tree = ast.parse(RESIDENT.read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "_BULK_SOURCE" for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"{RESIDENT}: no _BULK_SOURCE")


def _host_program(tmp: Path) -> Path:
    src = _bulk_source()
    for old, new in _HOST_EDITS:
        assert src.count(old) == 1, f"_BULK_SOURCE: {old!r} not found once"
        src = src.replace(old, new)
    cu = tmp / "bulk_dequant_host.cu"
    cu.write_text(_PRELUDE + src + _MAIN)
    exe = tmp / "bulk_dequant_host"
    res = subprocess.run([NVCC, "-std=c++17", "-w", "-o", str(exe), str(cu)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    return exe


def _record_at(slot: int) -> int:
    """Byte offset of a slot's 576-byte record (NoPE e4m3, then RoPE bf16) in the cache."""
    return (slot // BLOCK_SIZE) * PAGE + (slot % BLOCK_SIZE) * dc.TOKEN_DATA_BYTES


def _scales_at(slot: int) -> int:
    """Byte offset of a slot's 8 scale bytes (7 UE8M0 and a pad), after the page's records."""
    blk, off = divmod(slot, BLOCK_SIZE)
    return blk * PAGE + BLOCK_SIZE * dc.TOKEN_DATA_BYTES + off * dc.SCALE_BYTES_PER_TOKEN


def _cache(n: int, gen: torch.Generator) -> torch.Tensor:
    """An fp8_ds_mla SWA cache of n slots in which every e4m3 code meets every scale byte
    (1,024 blocks of 64 values: block b has scale byte b % 256 and codes 64 (b // 256) ...),
    the RoPE and pad bytes random."""
    cache = torch.randint(0, 256, (-(-n // BLOCK_SIZE) * PAGE,), dtype=torch.uint8, generator=gen)
    n_scales = dc.NOPE_DIM // dc.QUANT_BLOCK
    for s in range(n):
        for q in range(n_scales):
            b = (s * n_scales + q) % 1024
            at = _record_at(s) + q * dc.QUANT_BLOCK
            cache[at : at + dc.QUANT_BLOCK] = torch.arange(64 * (b // 256), 64 * (b // 256) + 64)
            cache[_scales_at(s) + q] = b % 256
    return cache


@pytest.mark.skipif(NVCC is None, reason="needs nvcc (the CUDA toolkit) to build the helpers for the host")
def test_bulk_dequant_matches_the_reference_bitwise(tmp_path):
    gen = torch.Generator().manual_seed(1)
    # the first `sweep` slots, all live, hold the 1,024 (codes, scale) blocks; the rest (past
    # IN_Q: staged in kv_s[0]) repeat some, and every third of them is dead
    sweep = -(-1024 // (dc.NOPE_DIM // dc.QUANT_BLOCK))
    n = 160
    assert IN_Q < sweep < n
    cache = _cache(n, gen)
    slots = torch.arange(n)
    recs = torch.stack([cache[_record_at(s) :][: dc.TOKEN_DATA_BYTES] for s in range(n)])
    # the scale word as the kernel loads it: the slot's 8 scale bytes as one int64
    words = torch.stack([cache[_scales_at(s) :][:8] for s in range(n)]).view(torch.int64).flatten()
    live = torch.ones(n, dtype=torch.uint8)
    live[sweep::3] = 0
    inp, out = tmp_path / "in.bin", tmp_path / "out.bin"
    inp.write_bytes(recs.numpy().tobytes() + words.numpy().tobytes() + live.numpy().tobytes())

    exe = _host_program(tmp_path)
    subprocess.run([str(exe), str(inp), str(out), str(n), str(IN_Q)], check=True)
    got = torch.from_numpy(np.fromfile(out, dtype=np.int16)).view(n, dc.HEAD_DIM)

    want = dc.dequant_fp8_ds_mla(cache, slots, BLOCK_SIZE, PAGE).to(torch.bfloat16)
    on = live.bool()
    assert (got[~on] == 0).all(), "dead slots must dequantise to zeros"
    # NaN codes (e4m3 0x7f / 0xff, 0 x an inf scale, RoPE NaNs) may differ in payload only
    nan = torch.isnan(want[on])
    assert torch.equal(torch.isnan(got[on].view(torch.bfloat16)), nan)
    assert torch.equal(got[on][~nan], want[on].view(torch.int16)[~nan])
    # the sweep did reach the extremes it claims to
    assert torch.isinf(want[on]).any() and (want[on] == 0).any() and nan.any()
