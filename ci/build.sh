#!/usr/bin/env bash
# Set-up and the main job in one command: a venv, the patched tree, installed editable.
#
#   bash ci/build.sh                 pinned base (VERSION), install route chosen by the machine
#   bash ci/build.sh --base nightly  any tools/apply.py arguments are passed through
#
# 1. .venv (or $VLLM_OVERLAY_VENV) with the tool's requirements;
# 2. python tools/apply.py "$@"  ->  build/vllm (+ build/vllm-report.json);
# 3. python ci/install.py build/vllm: upstream's precompiled route on a CUDA machine (wheel of the
#    exact base, sha256-verified), else the Python-only route (no GPU, as on CI).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VLLM_OVERLAY_VENV:-$PWD/.venv}
export PIP_DISABLE_PIP_VERSION_CHECK=1
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet -r tools/requirements.txt
"$VENV/bin/python" tools/apply.py "$@"
out=build/vllm
args=("$@")
for i in "${!args[@]}"; do [ "${args[$i]}" = --out ] && out=${args[$((i + 1))]}; done
"$VENV/bin/python" ci/install.py "$out"
echo "done: $out installed into $VENV (activate with: . $VENV/bin/activate)"
