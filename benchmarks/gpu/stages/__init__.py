# SPDX-License-Identifier: Apache-2.0
"""The stages: every module in this package that defines ``STAGE`` (see ../stage.py).

Adding a module here is all it takes to add a stage; nothing else lists them.
"""

import importlib
import pkgutil

from benchmarks.gpu.stage import Stage


def all_stages() -> dict[str, Stage]:
    stages = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        stage = getattr(module, "STAGE", None)
        if isinstance(stage, Stage):
            if stage.name in stages:
                raise ValueError(f"two stages named {stage.name!r} ({info.name})")
            stages[stage.name] = stage
    return stages


def select(names: str | list[str] | None) -> list[Stage]:
    """Stages by name, in the order given ("all" or None: every stage)."""
    stages = all_stages()
    if names in (None, "all", ["all"]):
        return list(stages.values())
    if isinstance(names, str):
        names = [n for n in names.split(",") if n]
    unknown = [n for n in names if n not in stages]
    if unknown:
        raise SystemExit(f"unknown stage(s) {', '.join(unknown)}; known: {', '.join(stages)}")
    return [stages[n] for n in names]
