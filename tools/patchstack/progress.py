"""Progress of long steps (downloads, the base import), as a user expects from pip.

On a terminal: a tqdm bar on stderr. Elsewhere (CI logs, pipes): a plain line at every tenth
of the way (or every 64 units of work when the total is unknown), so a log shows that the step
is moving without carriage-return noise. ``VLLM_OVERLAY_PROGRESS=bar|lines|off`` overrides.
"""

from __future__ import annotations

import os
import sys


def _mode() -> str:
    mode = os.environ.get("VLLM_OVERLAY_PROGRESS", "")
    if mode in ("bar", "lines", "off"):
        return mode
    return "bar" if sys.stderr.isatty() else "lines"


class _Lines:
    """Plain progress lines: '<label>: 12 of 50 MiB (24%)'."""

    def __init__(self, label: str, total: int | None, unit: str):
        self.label, self.total, self.unit = label, total or None, unit
        self.done, self.shown = 0, -1

    def _fmt(self, n: int) -> str:
        return f"{n / (1 << 20):.0f} MiB" if self.unit == "B" else f"{n} {self.unit}"

    def _line(self) -> str:
        if self.total:
            return f"{self.label}: {self._fmt(self.done)} of {self._fmt(self.total)} ({100 * self.done // self.total}%)"
        return f"{self.label}: {self._fmt(self.done)}"

    def update(self, n: int) -> None:
        self.done += n
        step = self.done * 10 // self.total if self.total else self.done // (64 << 20 if self.unit == "B" else 64)
        if step != self.shown:
            self.shown = step
            print(self._line(), file=sys.stderr, flush=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        if exc[0] is None and (self.total is None or self.shown < 10):
            print(f"{self._line()} done" if self.total is None else f"{self.label}: done", file=sys.stderr)


class _Off:
    def update(self, n: int) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass


def tracker(label: str, total: int | None, unit: str = "B"):
    """A context manager with ``update(n)``: a bar on a terminal, plain lines elsewhere."""
    mode = _mode()
    if mode == "off":
        return _Off()
    if mode == "bar":
        from tqdm import tqdm

        scale = unit == "B"
        return tqdm(total=total, desc=label, unit=unit, unit_scale=scale, unit_divisor=1024 if scale else 1000,
                    file=sys.stderr, leave=True, dynamic_ncols=True)
    return _Lines(label, total, unit)


def factory(label: str):
    """The ``progress`` argument of pypi-simple's download_package: total -> tracker."""
    return lambda total: tracker(label, total)
