#!/usr/bin/env bash
# Block-verification GPU validation and benchmark, one call on the H200 (no vLLM,
# no network). Prepare on the CPU machine (ignored dir, passed with `carry`):
#   bash benchmarks/block_verification/prepare_gpu_carry.sh PATCHED_TREE [BASE_TREE]
# Run from the repository root:  OUT=... bash benchmarks/block_verification/gpu_run.sh
# Stages (each capped, each logged under $OUT even if a later one fails):
#   setup, tests/patched/block_verification, gpu_bench.py, synthetic_harness.py,
#   upstream tests/v1/spec_decode/test_rejection_sampler_utils.py (remaining time).
set -u
T0=$(date +%s)
BUDGET=${BV_BUDGET_S:-395}
REPO=$PWD
K=$REPO/.cache/gpu-bv
OUT=${OUT:-/tmp/bv-out}
W=/tmp/bvw
mkdir -p "$OUT" "$W/tree" "$W/site" "$W/extra" "$W/boot"
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a "$OUT/run.log"; }

log "setup"
nvidia-smi --query-gpu=name,driver_version --format=csv > "$OUT/device.txt" 2>&1
tar xzf "$K/tree.tar.gz" -C "$W/tree"
python3 -m pip install -q --no-index --no-deps --target "$W/site" "$K"/wheels/*.whl \
  > "$OUT/pip.log" 2>&1
python3 -m pip install -q --no-index --no-deps --target "$W/extra" "$K"/extra/*.whl \
  >> "$OUT/pip.log" 2>&1
mkdir -p "$W/site/vllm-0.34.0.dist-info"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: 0.34.0\n' \
  > "$W/site/vllm-0.34.0.dist-info/METADATA"
cp "$REPO/benchmarks/block_verification/missing_module_stubs.py" "$W/boot/"
cat > "$W/boot/sitecustomize.py" <<'EOF'
import missing_module_stubs

missing_module_stubs.install()
EOF
# Packages found first on the machine win; extra/ (pytest, ...) only fills gaps.
export PYTHONPATH=$W/boot:$W/site:$W/tree:$W/extra
python3 -c "import torch, triton, numpy; print(torch.__version__, triton.__version__, \
numpy.__version__, torch.cuda.get_device_name())" | tee "$OUT/versions.txt"

# Stand-ins: empty files for missing compiled vllm modules (as h200-kit's
# stub_compiled_modules.sh), missing_module_stubs for missing third-party packages.
MODS="vllm.v1.worker.gpu.spec_decode.rejection_sampler_utils,vllm.v1.worker.gpu.spec_decode.rejection_sampler,vllm.v1.worker.gpu.sample.states,vllm.v1.watermarking,vllm.v1.watermarking.spec_decode,vllm.v1.worker.gpu.sample.watermark,vllm.v1.worker.gpu.sample.gumbel,vllm.v1.worker.gpu.spec_decode.fly,vllm.v1.worker.gpu.spec_decode.reference_rejection_sampler"
export BV_STUB_PACKAGES=""
for i in $(seq 1 30); do
  err=$(python3 -c "import importlib; [importlib.import_module(m) for m in '$MODS'.split(',')]" 2>&1 | tail -1)
  m=$(echo "$err" | grep -o "No module named '[^']*'" | head -1 | sed "s/No module named '\(.*\)'/\1/")
  [ -z "$m" ] && break
  case "$m" in
    vllm.*) f="$W/tree/$(echo "$m" | tr . /).py"; mkdir -p "$(dirname "$f")"; touch "$f"
            echo "empty stand-in: $m" >> "$OUT/setup.txt" ;;
    *) top=${m%%.*}; BV_STUB_PACKAGES="$BV_STUB_PACKAGES${BV_STUB_PACKAGES:+,}$top"
       export BV_STUB_PACKAGES; echo "stubbed package: $top" >> "$OUT/setup.txt" ;;
  esac
done
echo "last import check: ${err:-ok}" >> "$OUT/setup.txt"
echo "BV_STUB_PACKAGES=$BV_STUB_PACKAGES" >> "$OUT/setup.txt"
cat "$OUT/setup.txt"

log "tests/patched/block_verification"
timeout $(( $(left) < 100 ? $(left) : 100 )) python3 -m pytest -p no:cacheprovider -rA \
  --durations=10 tests/patched/block_verification > "$OUT/pytest_bv.log" 2>&1
log "pytest_bv rc=$?: $(tail -1 "$OUT/pytest_bv.log")"

log "gpu_bench"
timeout $(( $(left) < 150 ? $(left) : 150 )) python3 \
  benchmarks/block_verification/gpu_bench.py "$OUT/gpu_bench.json" \
  "$K/base_rejection_sampler_utils.py" > "$OUT/gpu_bench.log" 2>&1
log "gpu_bench rc=$?"

log "synthetic harness"
timeout $(( $(left) < 60 ? $(left) : 60 )) python3 \
  benchmarks/block_verification/synthetic_harness.py --device cuda \
  --json "$OUT/synthetic_h200.json" > "$OUT/synthetic.log" 2>&1
log "synthetic rc=$?"

log "upstream test_rejection_sampler_utils.py, $(left)s left"
mkdir -p "$W/upstream" && cp "$K/upstream/test_rejection_sampler_utils.py" "$W/upstream/"
(cd "$W/upstream" && timeout $(( $(left) - 3 )) python3 -m pytest -p no:cacheprovider \
  -n 8 -v -rfE --durations=10 test_rejection_sampler_utils.py) > "$OUT/pytest_upstream.log" 2>&1
log "pytest_upstream rc=$?: $(tail -1 "$OUT/pytest_upstream.log")"
grep -c " PASSED" "$OUT/pytest_upstream.log" | xargs echo "passed lines:" | tee -a "$OUT/run.log"
grep -E " (FAILED|ERROR)" "$OUT/pytest_upstream.log" | head -20 | tee -a "$OUT/run.log"
log "summary"
cat "$OUT/gpu_bench.log" | grep '^{' | cut -c1-400
grep '^{' "$OUT/synthetic.log" | cut -c1-300
tail -3 "$OUT/pytest_bv.log"
