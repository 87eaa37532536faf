#!/usr/bin/env bash
# The dspark GPU checks, in one call on the H200 (no vLLM, no network there).
# Prepare on the CPU machine (ignored dir, passed with `carry`):
#   python benchmarks/dspark/make_kernel_minitree.py PATCHED_TREE .cache/gpu-dspark/mini-patched
#   python benchmarks/dspark/make_kernel_minitree.py BASE_TREE    .cache/gpu-dspark/mini-base
#   (cd .cache/gpu-dspark/wheels && pip download --only-binary :all: \
#      --python-version 3.12 --platform manylinux2014_x86_64 pytest)
# Run (repository root): bash benchmarks/dspark/gpu_run.sh   ($OUT receives the logs)
set -u
K=.cache/gpu-dspark
OUT=${OUT:-/tmp/dspark-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv > "$OUT/device.txt" 2>&1
python3 -c "import pytest" 2>/dev/null || \
  python3 -m pip install -q --no-index --no-deps --target /tmp/dspark-pydeps "$K"/wheels/*.whl
export PYTHONPATH=/tmp/dspark-pydeps:$PWD/$K/mini-patched
export DSPARK_BASE_TREE=$PWD/$K/mini-base
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())" \
  | tee "$OUT/versions.txt"
(cd tests/patched/dspark && python3 -m pytest -v -s -p no:cacheprovider \
  test_dspark_prepare_inputs.py test_dspark_flatten_sampled.py test_dspark_step_timing.py \
  -k "not env_var and not dflash_propose") > "$OUT/pytest.log" 2>&1
echo "pytest rc=$?" | tee -a "$OUT/pytest.log"
tail -5 "$OUT/pytest.log"
python3 benchmarks/dspark/gpu_bench.py "$OUT/bench.json" > "$OUT/bench.log" 2>&1
echo "bench rc=$?"; tail -15 "$OUT/bench.log"
