#!/usr/bin/env bash
# The one test command: lint, tier 1 (the tool) and tier 2 (the patched tree on CPU).
#
#   bash ci/test.sh            everything below, in this order
#   bash ci/test.sh lint       workflow files (check-jsonschema + zizmor), ruff on the project's Python
#                              (pyproject.toml) and on overlay/ files with vLLM's settings
#   bash ci/test.sh tool       tier 1: tools/apply.py --check, pytest tests/tool
#   bash ci/test.sh cpu        tier 2: apply to the pinned base, install Python-only into .venv,
#                              upstream CPU tests of the touched areas, pytest tests/patched
#   bash ci/test.sh wheel      Python-only wheel of build/vllm + smoke test in a fresh venv
#   bash ci/test.sh precompiled  the wheel with upstream's CUDA binaries + smoke (240 MB download
#                              once, plus the base's CUDA torch in pip's build environment)
#
# Creates what it needs: .venv (Python >= 3.11; torch, vLLM's dependencies, test and lint tools),
# build/vllm (sdist cached in ~/.cache/vllm-overlay). Tier 3 (GPU) is not here: docs/install.md.
# Environment: VLLM_OVERLAY_VENV (default .venv), VLLM_OVERLAY_TORCH (pip arguments for torch),
# VLLM_OVERLAY_CI_PRECOMPILED=1 adds `precompiled` to the default run.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV=${VLLM_OVERLAY_VENV:-$ROOT/.venv}
TREE=$ROOT/build/vllm
PY=$VENV/bin/python
START=$SECONDS
export PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1

step() { printf '\n=== %s (%ss)\n' "$*" "$((SECONDS - START))"; }

ensure_venv() {
    if [ ! -x "$PY" ]; then
        step "venv $VENV"
        python3 -c 'import sys; assert sys.version_info >= (3, 11), "Python >= 3.11 needed"'
        python3 -m venv "$VENV"
    fi
}

# the venv plus what tools/apply.py and ci/install.py import (ci/requirements/install.txt) and
# any further requirement files: every stage must run alone on a fresh venv and an empty cache
ensure_deps() {
    ensure_venv
    "$PY" -m pip install --quiet -r ci/requirements/install.txt "$@"
}

# pytest with exit 5 (nothing collected) accepted only where the suite may be empty
run_pytest() {
    local may_be_empty=$1 label=$2; shift 2
    local rc=0
    "$@" || rc=$?
    if [ "$rc" -eq 5 ] && [ "$may_be_empty" = yes ]; then
        echo "$label: no tests collected (accepted: the suite is empty)"
        return 0
    fi
    [ "$rc" -eq 0 ] || { echo "$label: pytest exit $rc" >&2; return "$rc"; }
}

lint() {
    ensure_deps -r ci/requirements/lint.txt
    step "lint"
    "$VENV/bin/check-jsonschema" --builtin-schema vendor.github-workflows ci/workflows/*.yml
    "$VENV/bin/zizmor" --offline --no-progress ci/workflows/*.yml
    # the project's own Python (tools/, ci/, tests/, benchmarks/): settings in pyproject.toml
    "$VENV/bin/ruff" check .
    # overlay files are vLLM files: linted where they land in the tree, with vLLM's own settings
    [ -d "$TREE" ] || "$PY" tools/apply.py
    mapfile -t overlay < <(cd overlay && find vllm -name '*.py' | sort)
    if [ "${#overlay[@]}" -gt 0 ]; then
        (cd "$TREE" && "$VENV/bin/ruff" check "${overlay[@]}" && "$VENV/bin/ruff" format --check "${overlay[@]}")
    fi
}

tool() {
    ensure_deps -r ci/requirements/test.txt -r ci/requirements/build.txt
    step "tier 1: the tool"
    "$PY" tools/apply.py --check
    # shared helpers have real module names: one pytest call collects every tool-side directory
    "$PY" -m pytest -q --collect-only tests/tool tests/integration | tail -n 1
    run_pytest yes "tests/tool" "$PY" -m pytest -q tests/tool
}

cpu() {
    ensure_deps
    step "tier 2: apply to the pinned base"
    "$PY" tools/apply.py
    step "tier 2: install build/vllm (Python-only route)"
    "$PY" ci/install.py "$TREE" --route python-only --test-deps
    step "tier 2: upstream CPU tests of the touched areas"
    "$PY" ci/upstream_tests.py "$TREE" --explain
    mapfile -t ids < <("$PY" ci/upstream_tests.py "$TREE")
    [ "${#ids[@]}" -gt 0 ] || { echo "no upstream tests selected" >&2; return 1; }
    (cd "$TREE" && export VLLM_TARGET_DEVICE=cpu HF_HUB_OFFLINE=1 &&
        run_pytest no "upstream tests" "$PY" -m pytest -q -p no:cacheprovider "${ids[@]}")
    step "tier 2: tests/patched"
    (export VLLM_TARGET_DEVICE=cpu HF_HUB_OFFLINE=1 &&
        run_pytest yes "tests/patched" "$PY" -m pytest -q tests/patched)
    step "tier 2: tests/integration (real series on the 0.34.0 sdist, 0.33.0 -> 0.34.0 rehearsal)"
    run_pytest no "tests/integration" "$PY" -m pytest -q tests/integration
}

wheel() {
    ensure_deps -r ci/requirements/build.txt
    [ -d "$TREE" ] || "$PY" tools/apply.py
    step "wheel: Python-only"
    rm -rf build/dist
    "$PY" ci/build_wheel.py "$TREE" --variant python-only --out build/dist
    "$PY" ci/smoke_wheel.py build/dist/vllm-*.empty-py3-none-any.whl "$TREE"
}

precompiled() {
    ensure_deps -r ci/requirements/build.txt
    [ -d "$TREE" ] || "$PY" tools/apply.py
    step "wheel: precompiled (upstream's CUDA binaries)"
    "$PY" ci/build_wheel.py "$TREE" --variant precompiled --out build/dist-precompiled \
        ${VLLM_OVERLAY_ALLOW_UNAVAILABLE:+--allow-unavailable "$VLLM_OVERLAY_ALLOW_UNAVAILABLE"}
    "$PY" ci/smoke_wheel.py build/dist-precompiled/vllm-*-manylinux_2_28_*.whl "$TREE"
}

report() {
    step "done"
    du -sh "$VENV" build ~/.cache/vllm-overlay 2>/dev/null || true
}

if [ $# -eq 0 ]; then
    set -- lint tool cpu wheel
    [ "${VLLM_OVERLAY_CI_PRECOMPILED:-}" = 1 ] && set -- "$@" precompiled
fi
for stage in "$@"; do
    case $stage in
        lint | tool | cpu | wheel | precompiled) "$stage" ;;
        *) echo "unknown stage $stage (lint, tool, cpu, wheel, precompiled)" >&2; exit 2 ;;
    esac
done
report
