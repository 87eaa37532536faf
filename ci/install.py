#!/usr/bin/env python3
"""Install the patched tree (default build/vllm) editable, by one of upstream vLLM's own routes.

    python ci/install.py                  # auto: precompiled on a CUDA machine, else Python-only
    python ci/install.py --print          # show the exact pip command and environment, run nothing
    python ci/install.py --route python-only --test-deps

It installs into the Python that runs it (activate your venv first).

precompiled   upstream's `VLLM_USE_PRECOMPILED=1 pip install -e` with
              VLLM_PRECOMPILED_WHEEL_LOCATION set to the upstream wheel of the tree's base:
              for the pinned base the PyPI wheel named in VERSION, downloaded once into the
              cache and verified against VERSION's sha256; for a git base (nightly, a sha) the
              wheel upstream built for that exact commit and CUDA variant, or a refusal. Never
              another commit's or another CUDA variant's binaries (vLLM #52544, #13047).
python-only   `VLLM_TARGET_DEVICE=empty pip install --no-build-isolation -e` after the build
              requirements (ci/requirements/build.txt) and a CPU torch; no binaries at all.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402
from common import CIError  # noqa: E402

# torch for the Python-only route when none is installed. Upstream pins torch==2.14.0+cpu
# (requirements/build/cpu.txt) from the PyTorch CPU index; a CPU torch wheel in one of pip's
# find-links directories (this workplace keeps torch 2.13.0+cpu there) is used instead, since a
# plain `pip install torch` from PyPI is a multi-GB CUDA build.
TORCH_ENV = "VLLM_OVERLAY_TORCH"
UPSTREAM_CPU_TORCH = ["torch==2.14.0+cpu", "--index-url", "https://download.pytorch.org/whl/cpu"]
STAMP = "vllm-overlay-install.json"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ci/install.py", description=__doc__.split("\n\n")[0])
    p.add_argument("tree", nargs="?", type=Path, default=common.DEFAULT_TREE,
                   help="the patched tree (default build/vllm)")
    p.add_argument("--route", choices=("auto", "precompiled", "python-only"), default="auto")
    p.add_argument("--wheel", type=Path, help="use this upstream wheel file (still verified) instead of downloading")
    p.add_argument("--variant", help="CUDA variant of the upstream wheel for a git base (cu129, cu130); "
                                     "default: from the installed torch, else the base's main CUDA version")
    p.add_argument("--test-deps", action="store_true", help="also install ci/requirements/test.txt (pytest, tblib)")
    p.add_argument("--force", action="store_true", help="reinstall even if this tree is already installed")
    p.add_argument("--print", dest="dry_run", action="store_true", help="print the commands, run nothing")
    return p


# --- what is there ---------------------------------------------------------------------------------

def has_nvidia_gpu() -> bool:
    if os.path.exists("/dev/nvidiactl") or glob.glob("/dev/nvidia[0-9]*"):
        return True
    if shutil.which("nvidia-smi"):
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode == 0
    return False


def installed_torch() -> tuple[str, str | None] | None:
    """(version, CUDA version or None) of torch in this interpreter, None if absent."""
    code = "import json, torch; print(json.dumps([torch.__version__, torch.version.cuda]))"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if p.returncode:
        return None
    version, cuda = json.loads(p.stdout.strip().splitlines()[-1])
    return version, cuda


def find_links() -> list[str]:
    p = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True)
    dirs = []
    for line in p.stdout.splitlines():
        m = re.match(r"^[^=]*\.find-links='(.*)'$", line.strip())
        if m:
            dirs += m.group(1).split()
    return list(dict.fromkeys(dirs))


def torch_command() -> list[str]:
    """pip arguments that install a CPU torch (see TORCH_ENV)."""
    if os.environ.get(TORCH_ENV):
        return os.environ[TORCH_ENV].split()
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    for d in find_links():
        wheels = sorted(glob.glob(os.path.join(d.removeprefix("file://"), f"torch-*+cpu-{tag}-{tag}-*.whl")))
        if wheels:
            return [wheels[-1]]
    return UPSTREAM_CPU_TORCH


# --- plans -----------------------------------------------------------------------------------------

def python_only_plan(tree: Path, version: str | None, test_deps: bool) -> list[tuple[list, dict]]:
    pip = [sys.executable, "-m", "pip", "install"]
    steps: list[tuple[list, dict]] = []
    torch = installed_torch()
    if torch is None:
        cmd = torch_command()
        print(f"torch: none installed; installing {' '.join(cmd)}"
              + ("" if cmd is not UPSTREAM_CPU_TORCH else " (upstream's CPU pin; set "
                 f"${TORCH_ENV} to choose another)"), file=sys.stderr)
        steps.append(([*pip, *cmd], {}))
    else:
        print(f"torch: {torch[0]} already installed, kept", file=sys.stderr)
    steps.append(([*pip, "-r", common.BUILD_REQUIREMENTS], {}))
    env = {"VLLM_TARGET_DEVICE": "empty"}
    if version:
        env["VLLM_VERSION_OVERRIDE"] = version
    steps.append(([*pip, "--no-build-isolation", "-e", tree], env))
    if test_deps:
        steps.append(([*pip, "-r", common.TEST_REQUIREMENTS], {}))
    return steps


def precompiled_wheel(tree: Path, pin, base: common.BaseId, variant: str | None, local: Path | None,
                      fetch_json=None, check_torch: bool = True) -> tuple[common.UpstreamWheel, str]:
    """Which upstream wheel carries this base's binaries, and the CUDA variant it was built for.

    ``check_torch``: compare with the torch of this interpreter (an install; a wheel build
    brings its own torch in the isolated build environment).
    """
    main_cuda = common.main_cuda_version(tree)
    torch = installed_torch() if check_torch else None
    torch_variant = common.cuda_variant(torch[1]) if torch and torch[1] else None
    if base.kind == "pypi":
        # PyPI carries one build per release: upstream's main CUDA version of that release
        wheel_variant = common.cuda_variant(main_cuda)
        if variant and variant != wheel_variant:
            raise CIError(f"--variant {variant}: PyPI's wheel of {base.spec} is the {wheel_variant} build "
                          f"(VLLM_MAIN_CUDA_VERSION {main_cuda}); other variants are not on the index")
        if torch_variant and torch_variant != wheel_variant:
            raise CIError(f"installed torch {torch[0]} is a CUDA {torch[1]} build, the upstream wheel of "
                          f"{base.spec} is built for CUDA {main_cuda} ({wheel_variant}); its binaries would "
                          f"not match ({common.ISSUES}). Install torch for CUDA {main_cuda} or do a full source build")
        return common.release_wheel(pin, base), wheel_variant
    if base.kind == "git":
        chosen = variant or os.environ.get("VLLM_PRECOMPILED_WHEEL_VARIANT") or torch_variant \
            or common.cuda_variant(main_cuda)
        if torch_variant and chosen != torch_variant:
            raise CIError(f"variant {chosen} does not match the installed torch {torch[0]} (CUDA {torch[1]})")
        return common.nightly_wheel(base.commit or "", chosen, fetch_json=fetch_json), chosen
    if local is None:
        raise CIError(f"base {base.spec} is a local path: no upstream wheel is known to match it; pass "
                      "--wheel FILE (built from the same commit) or use --route python-only")
    why = "given with --wheel for a local base (not verifiable)"
    return common.UpstreamWheel(local.name, None, None, why), variant or "?"


def precompiled_plan(tree: Path, wheel_path: Path, version: str | None) -> list[tuple[list, dict]]:
    env = {"VLLM_USE_PRECOMPILED": "1", "VLLM_PRECOMPILED_WHEEL_LOCATION": str(wheel_path),
           "VLLM_TARGET_DEVICE": "cuda"}
    if version:
        env["VLLM_VERSION_OVERRIDE"] = version
    # build isolation on: pip builds with the base's own build requirements (torch==X CUDA)
    return [([sys.executable, "-m", "pip", "install", "-e", tree], env)]


# --- already installed? ----------------------------------------------------------------------------

def stamp_for(tree: Path, route: str, version: str | None, test_deps: bool) -> dict:
    files = ["setup.py", "pyproject.toml", *sorted(p.relative_to(tree).as_posix()
                                                     for p in (tree / "requirements").glob("*.txt"))]
    digest = {f: common.sha256_of(tree / f) for f in files if (tree / f).exists()}
    return {"tree": str(tree.resolve()), "route": route, "version": version, "test_deps": test_deps,
            "inputs": digest, "build_requirements": common.sha256_of(common.BUILD_REQUIREMENTS)}


def stamp_path() -> Path:
    return Path(sys.prefix) / STAMP


def imported_vllm() -> subprocess.CompletedProcess:
    """`import vllm` in this interpreter, outside the project: stdout ends with its file and version."""
    code = "import vllm; print(vllm.__file__); print(vllm.__version__)"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=dict(os.environ, VLLM_TARGET_DEVICE="cpu"), cwd="/")


def installed_matches(stamp: dict) -> bool:
    try:
        old = json.loads(stamp_path().read_text())
    except (FileNotFoundError, ValueError):
        return False
    if old != stamp:
        return False
    p = imported_vllm()
    if p.returncode:
        return False
    file, version = p.stdout.strip().splitlines()[-2:]
    # vllm/_version.py is written by the install; a restored one means: install again
    return Path(file).resolve().is_relative_to(Path(stamp["tree"]).resolve()) and (
        stamp["version"] is None or version == stamp["version"])


def describe(cmd: list) -> str:
    """What one pip step installs, in words (pip prints its own progress below it)."""
    args = [str(c) for c in cmd[cmd.index("install") + 1:]] if "install" in map(str, cmd) else []
    if "-e" in args:
        return f"the tree {args[args.index('-e') + 1]}, editable (pip builds it, then installs vLLM's requirements)"
    if "-r" in args:
        return f"the requirements in {Path(args[args.index('-r') + 1]).name}"
    return " ".join(Path(a).name if a.endswith(".whl") else a for a in args)


# --- main ------------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    tree = args.tree.absolute()
    try:
        if not (tree / "setup.py").exists():
            raise CIError(f"{tree}: no vLLM tree there; run `python tools/apply.py` first")
        pin = common.load_pin()
        base = common.read_base(tree, pin)
        for note in base.notes:
            print(f"note: {note}", file=sys.stderr)
        route = args.route
        if route == "auto":
            route = "precompiled" if has_nvidia_gpu() else "python-only"
            print(f"route: {route} ({'an NVIDIA GPU is present' if route == 'precompiled' else 'no NVIDIA GPU'}; "
                  "choose with --route)", file=sys.stderr)
        version = common.package_version(pin, base, python_only=route == "python-only")
        print(f"base: {base.spec} (upstream commit {base.commit}, from {base.source}); "
              f"installs as vllm {version or '(upstream version)'}", file=sys.stderr)
        stamp = stamp_for(tree, route, version, args.test_deps)
        if not args.force and not args.dry_run and installed_matches(stamp):
            print(f"already installed from {tree} ({route}, {version}); --force reinstalls", file=sys.stderr)
            return 0
        if route == "python-only":
            steps = python_only_plan(tree, version, args.test_deps)
        else:
            wheel, variant = precompiled_wheel(tree, pin, base, args.variant, args.wheel)
            print(f"precompiled binaries: {wheel.filename} ({wheel.why}; CUDA variant {variant})", file=sys.stderr)
            if args.dry_run:
                path = args.wheel or common.wheel_cache() / wheel.filename
            else:
                path = common.fetch_wheel(wheel, local=args.wheel)
            steps = precompiled_plan(tree, path, version)
            if args.test_deps:
                steps.append(([sys.executable, "-m", "pip", "install", "-r", common.TEST_REQUIREMENTS], {}))
        if args.dry_run:
            for cmd, env in steps:
                print(common.show(cmd, env))
            return 0
        stamp_path().unlink(missing_ok=True)
        for n, (cmd, env) in enumerate(steps, start=1):
            print(f"install step {n} of {len(steps)}: {describe(cmd)}", file=sys.stderr, flush=True)
            common.run(cmd, env)
        stamp_path().write_text(json.dumps(stamp, indent=2) + "\n")
        print(f"installed: vllm {version or ''} editable from {tree} ({route})", file=sys.stderr)
        return 0
    except CIError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    except common.ToolError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code


if __name__ == "__main__":
    sys.exit(main())
