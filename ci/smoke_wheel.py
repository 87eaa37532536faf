#!/usr/bin/env python3
"""Install a built wheel into a fresh virtual environment and check it is the patched vLLM.

    python ci/smoke_wheel.py dist/vllm-0.34.0+dspark.1.empty-py3-none-any.whl [build/vllm]

The wheel goes in with --no-deps; its dependencies come from the environment running this
script (a .pth line adds that environment's site-packages after the fresh one's: the editable
vLLM installed there is not seen, since .pth files of an added directory are not processed).
Checks, inside the fresh environment:
  - `import vllm` loads the fresh environment's copy;
  - importlib.metadata and vllm.__version__ both give the wheel's version;
  - every file under vllm/ that the tree's commits above `base` change (patches and overlay)
    is installed byte for byte as at the tree's HEAD, and differs from the base's version;
  - those modules import (a module needing a package absent here is reported, not failed).
"""

from __future__ import annotations

import argparse
import json
import site
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402
from common import CIError  # noqa: E402

CHECK = r"""
import hashlib, importlib, importlib.metadata, json, sys
from pathlib import Path
expected, files = json.loads(sys.argv[1]), json.loads(sys.argv[2])
optional = json.loads(sys.argv[3])  # packages of the tree's other targets (requirements/cuda.txt)
out = {"problems": [], "skipped": []}
import vllm
root = Path(vllm.__file__).resolve().parent
out["file"] = str(root)
if not root.is_relative_to(Path(sys.prefix).resolve()):
    out["problems"].append(f"vllm imported from {root}, not from the fresh environment {sys.prefix}")
meta = importlib.metadata.version("vllm")
for what, got in (("metadata", meta), ("vllm.__version__", vllm.__version__)):
    if got != expected:
        out["problems"].append(f"{what} is {got}, expected {expected}")
out["version"] = vllm.__version__
for rel, want in files.items():
    p = root.parent / rel
    if not p.exists():
        out["problems"].append(f"{rel}: not installed")
        continue
    if hashlib.sha256(p.read_bytes()).hexdigest() != want:
        out["problems"].append(f"{rel}: installed file differs from the patched tree")
    if rel.endswith(".py"):
        mod = rel[:-3].replace("/", ".").removesuffix(".__init__")
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as e:
            if (e.name or "").split(".")[0] == "vllm":
                out["problems"].append(f"import {mod}: {e}")
            else:
                out["skipped"].append(f"import {mod}: needs {e.name}, absent here")
        except ImportError as e:
            # vLLM's own guard for an optional package (vllm.tilelang_utils: "tilelang is required
            # ... not installed"): fine where that package belongs to another target's requirements
            import importlib.util
            absent = [n for n in optional if n in str(e) and importlib.util.find_spec(n) is None]
            if absent:
                out["skipped"].append(f"import {mod}: needs {absent[0]} (another target's requirement), absent here")
            else:
                out["problems"].append(f"import {mod}: ImportError: {e}")
        except Exception as e:
            out["problems"].append(f"import {mod}: {type(e).__name__}: {e}")
print("SMOKE " + json.dumps(out))
"""


def patched_files(tree: Path) -> dict[str, str]:
    """Files under vllm/ changed by the tree's commits above tag `base` -> sha256 at HEAD."""
    def git(*a: str, check: bool = True) -> subprocess.CompletedProcess:
        p = subprocess.run(["git", "-C", str(tree), *a], capture_output=True)
        if check and p.returncode:
            raise CIError(f"git {' '.join(a)} in {tree}: {p.stderr.decode().strip()}")
        return p

    names = git("diff", "--name-only", "--diff-filter=AMR", "base", "HEAD", "--", "vllm/").stdout.decode().split()
    out = {}
    import hashlib

    for name in names:
        head = git("show", f"HEAD:{name}").stdout
        base = git("show", f"base:{name}", check=False)
        if base.returncode == 0 and base.stdout == head:
            continue
        out[name] = hashlib.sha256(head).hexdigest()
    return out


def optional_packages(tree: Path) -> list[str]:
    """Import names of the packages only the CUDA target requires (requirements/cuda.txt)."""
    from packaging.requirements import InvalidRequirement, Requirement

    names = []
    path = tree / "requirements" / "cuda.txt"
    for line in path.read_text().splitlines() if path.exists() else []:
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        try:
            names.append(Requirement(line).name.replace("-", "_"))
        except InvalidRequirement:
            continue
    return names


def expected_version(wheel: Path) -> str:
    from packaging.utils import parse_wheel_filename

    return str(parse_wheel_filename(wheel.name)[1])


def smoke(wheel: Path, tree: Path, keep: Path | None = None) -> dict:
    wheel, tree = wheel.resolve(), tree.absolute()
    files = patched_files(tree)
    version = expected_version(wheel)
    with tempfile.TemporaryDirectory(prefix="vllm-smoke-") as tmp:
        venv = keep or Path(tmp) / "venv"
        common.run([sys.executable, "-m", "venv", "--without-pip", venv], quiet=True)
        py = venv / "bin" / "python"
        fresh_site = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                    capture_output=True, text=True, check=True).stdout.strip()
        deps = [p for p in site.getsitepackages() if Path(p).is_dir()]
        Path(fresh_site, "zz-smoke-deps.pth").write_text("\n".join(deps) + "\n")
        # this environment's pip installs into the fresh one (pip >= 22.3: --python)
        common.run([sys.executable, "-m", "pip", "--python", py, "install", "--quiet", "--no-deps", "--no-index",
                    "--no-compile", wheel], quiet=True)
        p = subprocess.run([py, "-c", CHECK, json.dumps(version), json.dumps(files),
                            json.dumps(optional_packages(tree))], capture_output=True,
                           text=True, cwd=tmp, env={"PATH": "/usr/bin:/bin", "VLLM_TARGET_DEVICE": "cpu",
                                                    "HOME": str(Path.home())})
        lines = [line for line in p.stdout.splitlines() if line.startswith("SMOKE ")]
        if p.returncode or not lines:
            raise CIError(f"the check failed inside the fresh environment:\n{p.stdout[-3000:]}{p.stderr[-3000:]}")
        result = json.loads(lines[-1][6:])
    result["patched_files"] = sorted(files)
    if result["problems"]:
        raise CIError(f"{wheel.name}: " + "; ".join(result["problems"]))
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="ci/smoke_wheel.py", description=__doc__.split("\n\n")[0])
    p.add_argument("wheel", type=Path)
    p.add_argument("tree", nargs="?", type=Path, default=common.DEFAULT_TREE)
    args = p.parse_args(argv)
    try:
        r = smoke(args.wheel, args.tree)
    except (CIError, common.ToolError) as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    n = len(r["patched_files"])
    print(f"smoke    {args.wheel.name}: imports vllm {r['version']} from a fresh venv; "
          + (f"{n} patched files installed as in the tree" if n else "no patched files in the tree (bare base)"))
    for s in r["skipped"]:
        print(f"  skipped {s}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
