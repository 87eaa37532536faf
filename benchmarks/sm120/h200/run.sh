#!/usr/bin/env bash
# One `run` call on the H200 (see README.md beside this file). Carry .cache/gpu-sm120
# (vllm.tar.gz: the patched tree's vllm/ package without .so files; whl/: py3.12 wheels).
set -u
C=.cache/gpu-sm120
H=benchmarks/sm120/h200
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site $C/whl/*.whl || exit 1
mkdir -p /tmp/tree && tar xzf $C/vllm.tar.gz -C /tmp/tree && touch /tmp/tree/vllm/_C_stable_libtorch.py
mkdir -p /tmp/site/vllm-0.34.0.dist-info
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: 0.34.0\n' > /tmp/site/vllm-0.34.0.dist-info/METADATA
export PYTHONPATH=/tmp/tree:/tmp/site:$H
nvidia-smi -L
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name(), torch.cuda.get_device_capability())"
for i in $(seq 1 8); do  # empty stand-ins for compiled vllm modules imported at load
  err=$(python3 -c "import h200_prelude, vllm.model_executor.kernels.linear, vllm.config" 2>&1 | grep -o "No module named '[^']*'" | head -1)
  [ -z "$err" ] && break
  m=$(echo "$err" | sed "s/No module named '\(.*\)'/\1/")
  case "$m" in vllm.*) f="/tmp/tree/$(echo "$m" | tr . /).py"; mkdir -p "$(dirname "$f")"; touch "$f"; echo "stubbed $m";;
    *) echo "missing third-party module $m"; break;; esac
done
python3 -c "import h200_prelude, vllm.model_executor.kernels.linear, vllm.config" 2>&1 | tail -3
python3 $H/h200_run.py --direct $OUT/direct_triton.json > $OUT/direct.log 2>&1; echo "direct exit $?"; tail -2 $OUT/direct.log
python3 $H/h200_run.py --quick --json $OUT/A_default_quick.json > $OUT/A.log 2>&1; echo "A (default env, quick) exit $?"; tail -14 $OUT/A.log
VLLM_DISABLED_KERNELS=MarlinFP8ScaledMMLinearKernel,HummingFP8ScaledMMLinearKernel \
  python3 $H/h200_run.py --json $OUT/B_full.json > $OUT/B.log 2>&1; echo "B (Marlin/Humming off, full) exit $?"; tail -12 $OUT/B.log
python3 $H/h200_run.py --inject-wrong --quick --m 64 --scales e8m0 --json $OUT/C_inject.json > $OUT/C.log 2>&1; echo "C (injected wrong) exit $?"; tail -6 $OUT/C.log
