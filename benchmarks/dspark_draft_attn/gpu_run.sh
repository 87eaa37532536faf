#!/usr/bin/env bash
# Run on the H200 from the carry dir made by prepare_gpu_carry.sh:
#   cd DIR && OUT=... bash gpu_run.sh [check|bench|all] [--quick]
set -u
K=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/dda-out}
W=/tmp/ddaw
mkdir -p "$OUT" "$W/tree" "$W/site" "$W/tl" "$W/boot"
tar xzf "$K/tree.tar.gz" -C "$W/tree"
tar xJf "$K/tilelang-site.tar.xz" -C "$W/tl"
# Kit only: the package __init__ imports the whole DSV4 model, i.e. compiled ops the
# machine lacks; the kernel modules below it need none of that.
: > "$W/tree/vllm/models/deepseek_v4/__init__.py"
python3 -m pip install -q --no-index --no-deps --target "$W/site" "$K"/wheels/*.whl > "$OUT/pip.log" 2>&1
mkdir -p "$W/site/vllm-0.34.0.dist-info"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: 0.34.0\n' > "$W/site/vllm-0.34.0.dist-info/METADATA"
cp "$K/missing_module_stubs.py" "$W/boot/"
printf 'import missing_module_stubs\n\nmissing_module_stubs.install()\n' > "$W/boot/sitecustomize.py"
export PYTHONPATH=$W/boot:$W/site:$W/tree:$W/tl
MODS="vllm.v1.attention.backends.mla.sparse_swa,vllm.v1.attention.ops.rocm_aiter_mla_sparse,vllm.models.deepseek_v4.nvidia.ops.dspark_draft_attn_tilelang"
export BV_STUB_PACKAGES=""
for i in $(seq 1 40); do
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
cat "$OUT/setup.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv | tee "$OUT/device.txt"
export PYTHONUNBUFFERED=1
python3 "$K/draft_attn_gpu.py" "${1:-all}" --json "$OUT/draft_attn.json" "${@:2}" 2>&1 | tee "$OUT/log.txt"
exit "${PIPESTATUS[0]}"
