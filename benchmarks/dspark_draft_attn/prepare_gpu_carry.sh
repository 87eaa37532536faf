#!/usr/bin/env bash
# Pack what the H200 (torch + Triton, no vLLM, no network) needs to run draft_attn_gpu.py:
#   bash benchmarks/dspark_draft_attn/prepare_gpu_carry.sh PATCHED_TREE DIR [TILELANG_VERSION]
# PATCHED_TREE: tools/apply.py's build/vllm (overlay included). DIR: a git-ignored folder,
# passed to the device with carry. Then on the machine: bash DIR/gpu_run.sh
set -euo pipefail
TREE=${1:?patched tree}
K=${2:?carry dir}
VER=${3:-0.1.12}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$K/wheels"
# the tree's vllm/ package with this checkout's overlay files on top (current kernel)
S=$(mktemp -d); trap 'rm -rf "$S"' EXIT
tar cf - -C "$TREE" --exclude='__pycache__' --exclude='*.so' vllm | tar xf - -C "$S"
cp -r "$HERE/../../overlay/vllm" "$S/"
tar czf "$K/tree.tar.gz" -C "$S" vllm
[ -f "$K/tilelang-site.tar.xz" ] || bash /work/shared/tools/h200-kit/prepare_tilelang_carry.sh "$K" "$VER"
pip download -q --only-binary :all: --python-version 3.12 --no-deps -d "$K/wheels" \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
  pydantic==2.12.5 pydantic-core==2.41.5 annotated-types typing-inspection pyzmq msgspec \
  cachetools pybase64 dill truststore cbor2 py-cpuinfo nvidia-ml-py
cp "$HERE/draft_attn_gpu.py" "$HERE/gpu_run.sh" "$HERE/../block_verification/missing_module_stubs.py" "$K/"
du -sh "$K"
