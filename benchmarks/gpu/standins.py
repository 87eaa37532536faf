# SPDX-License-Identifier: Apache-2.0
"""Every stand-in the GPU runs use, in one place. The GPU machine has torch and Triton but
no vLLM build: vLLM's compiled extension modules (vllm._C_stable_libtorch, ...) and the
_C library's ops are absent, and so may be third-party packages nobody carried.

- compiled vllm modules: empty modules for names the tree has no source for;
- third-party packages: permissive dummies (every attribute a subclassable, callable class);
- _C capability queries vLLM asks at import (cutlass_scaled_mm_supports_fp8, ...): torch ops
  answering "not supported", so those kernels report unavailable.

The finder sits at the END of sys.meta_path, so it only answers for names no real finder
can import: code from our tree, torch, Triton, numpy and pytest are never replaced. Which
names it serves is decided by the runner (``discover``, from the stages' declared imports)
and passed in GPU_STANDIN_COMPILED / GPU_STANDIN_PACKAGES; what it served in a process is in
SERVED and goes into each stage's JSON. Anything that calls into a stand-in fails loudly.

    python -m benchmarks.gpu.standins discover TREE MODULE...   (prints JSON; needs the runner's env)
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import json
import os
import subprocess
import sys
import types
from pathlib import Path

NEVER = {"vllm", "torch", "triton", "numpy", "pytest", "_pytest", "benchmarks", "tests"}
C_CAPABILITY_QUERIES = (
    "cutlass_scaled_mm_supports_fp8",
    "cutlass_scaled_mm_supports_block_fp8",
    "cutlass_group_gemm_supported",
)
SERVED: list[str] = []
# Compiled vllm modules every run on that machine needs, so discovery starts with them (each
# discovery round is a fresh import of vLLM). Found by discovery on the H200, 2026-12-03.
KNOWN_COMPILED = {
    # vllm.platforms.cuda imports it unguarded at load
    "vllm._C_stable_libtorch": "imported unguarded by vllm.platforms.cuda",
    # vllm/vllm_flash_attn/__init__.py raises ImportError unless a flash-attention extension
    # imports; vllm.v1.worker.utils reaches it through the attention layers (dspark's modules)
    "vllm.vllm_flash_attn._vllm_fa2_C": "vllm.vllm_flash_attn refuses to import without it",
}
# Third-party packages vLLM's config imports that a stage may not carry (the tilelang stage
# cannot: vllm-config-deps' apache-tvm-ffi clashes with tilelang's). Discovery starts with
# them and keeps only those a successful import round served: each seeded one saves a fresh
# import of vLLM (~30 s on the H200, 2026-12-03), and a carried wheel still wins (the
# finder is last on sys.meta_path).
KNOWN_PACKAGES = {
    "cbor2": "vllm.utils.hashing imports it at load",
    "llguidance": "vllm.config's structured-output imports",
    "xgrammar": "vllm.config's structured-output imports",
}


class _AnyMeta(type):
    def __getattr__(cls, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _any(f"{cls.__name__}.{name}")

    def __call__(cls, *args, **kwargs):
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]  # used as a decorator: keep the function
        return cls

    def __getitem__(cls, item):
        return cls

    def __or__(cls, other):
        return cls

    def __ror__(cls, other):
        return cls

    def __iter__(cls):
        return iter(())

    def __bool__(cls):
        return False

    def __len__(cls):
        return 0


def _any(name: str) -> type:
    return _AnyMeta(name, (), {})


class _DummyModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            if name == "__version__":
                return "0.0.0"
            raise AttributeError(name)
        value = _any(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


class _Loader(importlib.abc.Loader):
    def __init__(self, dummy: bool):
        self.dummy = dummy

    def create_module(self, spec):
        module = (_DummyModule if self.dummy else types.ModuleType)(spec.name)
        module.__path__ = []  # a package, so submodules resolve here too
        return module

    def exec_module(self, module):
        pass


def _is_probe() -> bool:
    """importlib.util.find_spec asks whether a package exists: the answer stays no."""
    frame = sys._getframe(2)
    while frame is not None:
        code = frame.f_code
        if code.co_name == "find_spec" and code.co_filename.endswith("util.py"):
            return True
        if code.co_name == "_find_and_load":
            return False
        frame = frame.f_back
    return False


class StandinFinder(importlib.abc.MetaPathFinder):
    def __init__(self, compiled: set[str], packages: set[str]):
        self.compiled, self.packages = compiled, packages - NEVER

    def find_spec(self, fullname, path, target=None):
        top = fullname.split(".")[0]
        if fullname in self.compiled:
            dummy = False
        elif top in self.packages and not _is_probe():
            dummy = True
        else:
            return None
        if fullname not in SERVED:
            SERVED.append(fullname)
        return importlib.machinery.ModuleSpec(fullname, _Loader(dummy), is_package=True)


def _env_set(name: str) -> set[str]:
    return set(os.environ.get(name, "").split(",")) - {""}


def install() -> StandinFinder:
    """Called from the runner's sitecustomize in every stage process."""
    for finder in sys.meta_path:
        if isinstance(finder, StandinFinder):
            return finder
    finder = StandinFinder(_env_set("GPU_STANDIN_COMPILED"), _env_set("GPU_STANDIN_PACKAGES"))
    sys.meta_path.append(finder)
    if os.environ.get("GPU_STANDIN_C_OPS") == "1":
        install_c_capability_queries()
    return finder


def install_c_capability_queries() -> list[str]:
    import torch

    defined = []
    lib = torch.library.Library("_C", "FRAGMENT")
    for name in C_CAPABILITY_QUERIES:
        if not hasattr(torch.ops._C, name):
            lib.define(f"{name}(int cap) -> bool")
            lib.impl(name, lambda cap: False, "CompositeExplicitAutograd")
            defined.append(f"torch.ops._C.{name}")
    install_c_capability_queries.lib = lib  # keep the registration alive
    SERVED.extend(defined)
    return defined


def _has_source(tree: Path, module: str) -> bool:
    base = tree.joinpath(*module.split("."))
    return base.with_suffix(".py").exists() or (base / "__init__.py").exists()


def _try_imports(modules: list[str]) -> dict:
    """In a fresh process: import modules in order, stop at the first failure (vLLM's
    import-time registrations with torch cannot be repeated in one process)."""
    install()
    for module in modules:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as e:
            return {"module": module, "missing": e.name or "", "error": f"{type(e).__name__}: {e}"}
        except Exception as e:  # noqa: BLE001 - reported; the stage will show it too
            return {"module": module, "missing": None, "error": f"{type(e).__name__}: {e}"}
    return {"served": SERVED}


def discover(tree: Path, modules: list[str], rounds: int = 30) -> dict:
    """Import `modules`, each round in a fresh process; every module a chain lacks becomes a
    stand-in (a compiled vllm module the tree has no source for, or a third-party package)
    and the imports are retried, until they import or fail for another reason."""
    compiled = _env_set("GPU_STANDIN_COMPILED") | {m for m in KNOWN_COMPILED if not _has_source(tree, m)}
    seeded = set(KNOWN_PACKAGES) - _env_set("GPU_STANDIN_PACKAGES")
    packages = _env_set("GPU_STANDIN_PACKAGES") | seeded
    failure: dict = {}
    done = 0
    while done < rounds:
        done += 1
        env = {**os.environ, "GPU_STANDIN_COMPILED": ",".join(sorted(compiled)),
               "GPU_STANDIN_PACKAGES": ",".join(sorted(packages))}
        proc = subprocess.run([sys.executable, "-m", "benchmarks.gpu.standins", "try", *modules],
                              capture_output=True, text=True, env=env)
        try:
            failure = json.loads(proc.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            failure = {"error": f"import probe exited {proc.returncode}: {proc.stderr[-1000:]}"}
            break
        if "served" in failure:  # every module imported
            served_tops = {name.split(".")[0] for name in failure.pop("served")}
            packages -= seeded - served_tops
            failure = {}
            break
        missing = failure.get("missing") or ""
        top = missing.split(".")[0]
        if missing.startswith("vllm.") and not _has_source(tree, missing) and missing not in compiled:
            compiled.add(missing)
        elif top and top not in NEVER and top not in packages:
            packages.add(top)
        else:
            break
    return {"compiled_vllm_modules": sorted(compiled), "packages": sorted(packages),
            "c_ops": [f"torch.ops._C.{n}" for n in C_CAPABILITY_QUERIES]
            if os.environ.get("GPU_STANDIN_C_OPS") == "1" else [],
            "import_failure": failure or None, "import_rounds": done}


def main(argv: list[str]) -> None:
    if argv[:1] == ["discover"]:
        print(json.dumps(discover(Path(argv[1]), argv[2:])))
    elif argv[:1] == ["try"]:
        print(json.dumps(_try_imports(argv[1:])))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    # Run the importable module, not this __main__ copy: the runner's sitecustomize installed
    # benchmarks.gpu.standins' finder, and what that finder serves is in that module's SERVED.
    from benchmarks.gpu import standins as canonical

    canonical.main(sys.argv[1:])
