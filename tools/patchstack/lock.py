"""One run at a time per build tree, and per bases cache: an advisory lock the kernel drops when
the process ends (a killed run leaves no stale lock behind)."""

from __future__ import annotations

import fcntl
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .errors import ToolError


@contextmanager
def hold(directory: Path, what: str, wait: bool = False) -> Iterator[None]:
    """Hold an exclusive lock on ``directory`` (created if missing); refuse, or wait, when another run has it."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise ToolError(f"{directory}: is not a directory (or lies under a file); it should hold {what}") from None
    fd = os.open(directory, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not wait:
                raise ToolError(f"{directory}: another tools/apply.py run holds the lock on {what}; "
                                "wait for it to finish (this run changed nothing)") from None
            print(f"waiting for another tools/apply.py run that is using {what} ({directory})", file=sys.stderr)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
