#!/usr/bin/env bash
# Set-up and the main job in one command: a venv, the patched tree, installed editable.
#
#   bash ci/build.sh                                   pinned base (VERSION), install route chosen by the machine
#   bash ci/build.sh --base pypi:0.33.0 --out build/vllm-0.33   any tools/apply.py arguments pass through
#
# 1. .venv (or $VLLM_OVERLAY_VENV) with what the two scripts below import (ci/requirements/install.txt,
#    which includes tools/requirements.txt; tests/tool/test_requirements.py keeps it complete);
# 2. python tools/apply.py "$@"  ->  build/vllm (+ build/vllm-report.json);
# 3. python ci/install.py <tree>: upstream's precompiled route on a CUDA machine (wheel of the
#    exact base, sha256-verified), else the Python-only route (no GPU, as on CI).
# With a mode that builds no tree (--status, --check, --export, --abort, --version, --help), step 3 is skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VLLM_OVERLAY_VENV:-$PWD/.venv}
export PIP_DISABLE_PIP_VERSION_CHECK=1
python3 -c 'import sys; assert sys.version_info >= (3, 11), "Python >= 3.11 needed"'
if [ ! -x "$VENV/bin/python" ]; then
    echo "set-up: creating $VENV" >&2
    python3 -m venv "$VENV"
fi
echo "set-up: installing ci/requirements/install.txt into $VENV" >&2
"$VENV/bin/python" -m pip install --quiet -r ci/requirements/install.txt

out=build/vllm
install=yes
args=("$@")
for i in "${!args[@]}"; do
    case ${args[$i]} in
        --out) out=${args[$((i + 1))]:-$out} ;;
        --out=*) out=${args[$i]#--out=} ;;
        --status | --check | --export | --abort | --version | -h | --help) install=no ;;
    esac
done
"$VENV/bin/python" tools/apply.py "$@"
[ "$install" = yes ] || exit 0
"$VENV/bin/python" ci/install.py "$out"
echo "done: $out installed into $VENV (activate with: . $VENV/bin/activate)"
