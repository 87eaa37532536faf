# SPDX-License-Identifier: Apache-2.0
"""What a stage declares, and what it gets when it runs on the GPU machine.

A stage is one module in benchmarks/gpu/stages/ with a module-level
``STAGE = Stage(...)``. Declaring it there is all the harness needs: the
preparation step packs what ``needs`` and ``tree_files`` name, the runner runs
``run(ctx)`` in its own process, capped at ``time_cap_s``, and writes the dict it
returns (plus whatever ``ctx.save`` recorded before a timeout) to $OUT/<name>.json.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

# What a stage can ask the preparation step to pack (benchmarks/gpu/needs.py):
#   "base"              the unpatched tree (the patched tree's `base` tag), for A/B runs
#   "vllm-sampler-deps" small wheels vLLM's v1 worker modules import (pydantic, msgspec, ...)
#   "vllm-config-deps"  wheels vllm.config and the linear kernels import (xgrammar, cbor2, ...)
#   "tilelang"          tilelang and its dependencies unpacked (~44 MB, h200-kit recipe)


@dataclass(frozen=True)
class Stage:
    name: str
    doc: str
    run: Callable[[Context], dict]
    time_cap_s: int
    needs: tuple[str, ...] = ()
    # paths of the patched tree outside vllm/ to pack (e.g. upstream test files)
    tree_files: tuple[str, ...] = ()
    # modules that must import on the machine; the runner finds stand-ins for what they lack
    imports: tuple[str, ...] = ()


@dataclass
class Context:
    """Paths and helpers for a running stage (built by benchmarks/gpu/run.py)."""

    name: str
    repo: Path  # this repository (tests/, ci/, benchmarks/)
    tree: Path  # the patched tree: vllm/ plus the stage's tree_files
    base: Path | None  # the unpatched tree, when the stage needs "base"
    work: Path  # scratch folder of this stage; its files end up in logs.tar.gz
    json_path: Path  # $OUT/<name>.json
    deadline: float  # time.time() at which the runner kills the stage
    env: dict = field(default_factory=dict)
    result: dict = field(default_factory=dict)

    def left(self) -> float:
        return self.deadline - time.time()

    def save(self, **items) -> None:
        """Record results now, so that they survive a later timeout."""
        self.result.update(items)
        self.json_path.write_text(json.dumps(self.result, indent=1, default=str) + "\n")

    def sh(self, step: str, argv: list[str], cap_s: float, cwd: Path | None = None,
           env: dict | None = None) -> dict:
        """Run one step as a subprocess, capped at min(cap_s, time left - 5 s).

        The step's output goes to work/<step>.log; the return value (rc, seconds,
        last lines) is what the stage puts in its JSON.
        """
        timeout = max(1.0, min(cap_s, self.left() - 5))
        log = self.work / f"{step}.log"
        t0 = time.time()
        with open(log, "w") as f:
            rc = run_capped(argv, timeout, cwd=cwd or self.repo, stdout=f, env={**os.environ, **(env or {})})
        lines = log.read_text(errors="replace").splitlines()
        out = {"rc": rc, "seconds": round(time.time() - t0, 1), "cap_s": round(timeout),
               "tail": lines[-3:]}
        print(f"[{self.name}] {step}: rc={rc} {out['seconds']}s {lines[-1][:160] if lines else ''}",
              flush=True)
        return out


def run_capped(argv: list[str], timeout: float, **kwargs) -> int | str:
    """subprocess.run with a timeout that also ends the child's children (pytest -n 8
    workers): the child gets its own process group, which is killed on timeout."""
    proc = subprocess.Popen(argv, start_new_session=True, stderr=subprocess.STDOUT, **kwargs)
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return "timeout"
