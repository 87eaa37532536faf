#!/usr/bin/env bash
# Build .cache/gpu-bv (git-ignored) for gpu_run.sh; pass it to `run` with
# carry: [".cache/gpu-bv"]. Usage, from the repository root:
#   bash benchmarks/block_verification/prepare_gpu_carry.sh PATCHED_TREE [BASE_TREE]
# PATCHED_TREE: a vLLM 0.34.0 source tree with patches/series applied and the
# overlay copied (tools/apply.py's build/vllm). The unpatched
# rejection_sampler_utils.py comes from BASE_TREE if given, else from the tree's
# `base` tag (the upstream commit tools/apply.py started from).
set -eu
TREE=${1:?patched tree}
BASE=${2:-}
K=.cache/gpu-bv
rm -rf "$K" && mkdir -p "$K/wheels" "$K/extra" "$K/upstream"
tar czf "$K/tree.tar.gz" -C "$TREE" --exclude='__pycache__' --exclude='*.so' vllm
RSU=vllm/v1/worker/gpu/spec_decode/rejection_sampler_utils.py
if [ -n "$BASE" ]; then cp "$BASE/$RSU" "$K/base_rejection_sampler_utils.py"
else git -C "$TREE" show "base:$RSU" > "$K/base_rejection_sampler_utils.py"; fi
cp "$TREE/tests/v1/spec_decode/test_rejection_sampler_utils.py" "$K/upstream/"
DL="pip download -q --only-binary :all: --python-version 3.12 --no-deps
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64
  --platform manylinux_2_28_x86_64"
# h200-kit's list (what vllm's sampler imports need there) ...
$DL -d "$K/wheels" pydantic==2.12.5 pydantic-core==2.41.5 annotated-types \
  typing-inspection pyzmq msgspec cachetools pybase64 dill truststore
# ... plus what RejectionSampler and pytest need.
$DL -d "$K/extra" cloudpickle py-cpuinfo uvloop pytest pluggy iniconfig packaging \
  pygments pytest-xdist execnet
du -sh "$K"
