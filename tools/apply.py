#!/usr/bin/env python3
"""Build the patched vLLM tree: upstream base + patches/series + overlay/ -> build/vllm.

    python tools/apply.py                    # the base pinned in VERSION (PyPI sdist)
    python tools/apply.py --base nightly     # tip of upstream main (git remote)
    python tools/apply.py --status --base nightly   # what would apply, without touching build/
    python tools/apply.py --continue | --abort | --export | --check

The logic lives in tools/patchstack/; this file only parses arguments and turns expected
errors into one message and an exit code (1: conflict or check failure, 2: bad input).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from patchstack.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
