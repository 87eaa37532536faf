# SPDX-License-Identifier: Apache-2.0
"""Stand-ins for third-party packages a machine lacks, so that vLLM's sampler
modules import there (the H200 has torch and Triton but no vLLM dependencies).

``install()`` appends a finder at the end of sys.meta_path: it only answers
for top-level packages no other finder can import, and never for vllm. Every
attribute of a stand-in module is a permissive dummy class (subclassable,
callable, indexable). Code that really uses such a package fails loudly when it
calls into it; the rejection sampler's kernels and tests do not. Each stand-in
is recorded in STUBBED so a run can report what it replaced.
"""

import importlib.abc
import importlib.machinery
import os
import sys
import types

STUBBED: list[str] = []
_NEVER = {"vllm", "torch", "triton", "numpy", "pytest", "_pytest"}


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


class _StubModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            if name == "__version__":
                return "0.0.0"
            raise AttributeError(name)
        value = _any(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


class _StubLoader(importlib.abc.Loader):
    def create_module(self, spec):
        module = _StubModule(spec.name)
        module.__path__ = []  # a package, so submodules resolve here too
        return module

    def exec_module(self, module):
        pass


def _is_probe() -> bool:
    """importlib.util.find_spec asks whether a package exists: say no."""
    frame = sys._getframe(2)
    while frame is not None:
        code = frame.f_code
        if code.co_name == "find_spec" and code.co_filename.endswith("util.py"):
            return True
        if code.co_name == "_find_and_load":
            return False
        frame = frame.f_back
    return False


# Packages vLLM imports unconditionally on the way to the sampler modules and
# the tests (found by importing them with only torch, Triton, numpy and the
# carried wheels present). Optional imports are left to fail as they should.
STUB_PACKAGES = set(os.environ.get("BV_STUB_PACKAGES", "").split(",")) - {""}


class _StubFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        top = fullname.split(".")[0]
        if top not in STUB_PACKAGES or top in _NEVER or _is_probe():
            return None
        if top not in STUBBED:
            STUBBED.append(top)
        return importlib.machinery.ModuleSpec(fullname, _StubLoader(), is_package=True)


def install() -> None:
    if not any(isinstance(f, _StubFinder) for f in sys.meta_path):
        sys.meta_path.append(_StubFinder())
