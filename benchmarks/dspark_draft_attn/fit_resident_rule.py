# SPDX-License-Identifier: Apache-2.0
"""Refit launch_tile's KV-resident rule on `rules` runs (no GPU needed).

The rule (dspark_draft_attn_common, above RESIDENT_GATHER_COST): the resident launch is taken
iff launch_waves(resident CTAs) x (GATHER + PASS x passes) < launch_waves(streaming CTAs),
where a short last wave counts LAST_WAVE_FIXED plus the rest in proportion to the SMs it fills.
This reads the result files of `draft_attn_gpu rules --rule-sizes ...` (both tiles timed at
each size), says where the library's numbers pick the slower tile, and grid-searches the three
numbers: fewest misses first, then the squared log error of the predicted resident / streaming
cost ratio against the measured time ratio. Run it after a kernel change moved the timings:

  python -m benchmarks.dspark_draft_attn.fit_resident_rule \\
      benchmarks/dspark_draft_attn/h100-2026-12-07-run6{3,4,6}-rules-stage.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

from vllm.models.deepseek_v4.nvidia.ops import dspark_draft_attn_common as dc


@dataclass(frozen=True)
class Timed:
    """One size where both tiles were timed (N = 5)."""

    reqs: int
    heads: int
    sm_count: int
    streaming_ctas: int
    resident_ctas: int
    streaming_us: float
    resident_us: float
    passes: int  # of the resident tile (resident_passes)


@dataclass(frozen=True)
class Model:
    gather: float
    per_pass: float
    last_wave_fixed: float

    def cost_ratio(self, t: Timed) -> float:
        """Predicted resident / streaming launch cost (< 1: resident)."""
        resident = dc.launch_waves(t.resident_ctas, t.sm_count, self.last_wave_fixed)
        streaming = dc.launch_waves(t.streaming_ctas, t.sm_count, self.last_wave_fixed)
        return resident * (self.gather + self.per_pass * t.passes) / streaming


LIBRARY = Model(dc.RESIDENT_GATHER_COST, dc.RESIDENT_PASS_COST, dc.LAST_WAVE_FIXED)


def load(paths: list[Path]) -> list[Timed]:
    timed = []
    for path in paths:
        rows = json.loads(path.read_text())["draft_attn"]["resident_rule"]["rows"]
        for r in rows:
            if r["N"] != 5 or not (r["streaming_ok"] and r["resident_ok"]):
                continue  # a wrong tile's time says nothing
            cfg = dc.select_tile_config(r["H"], 5, (9, 0))
            passes = dc.resident_passes(dc.resident_tile(cfg, r["H"], 5), 5)
            timed.append(Timed(r["R"], r["H"], r["sm_count"], r["streaming_ctas"], r["resident_ctas"],
                               r["streaming_us"], r["resident_us"], passes))  # fmt: skip
    return timed


def score(model: Model, timed: list[Timed]) -> tuple[list[Timed], float]:
    """The sizes where the model picks the slower tile, and its squared log error."""
    misses = [t for t in timed if (model.cost_ratio(t) < 1) != (t.resident_us < t.streaming_us)]
    error = sum((math.log(model.cost_ratio(t)) - math.log(t.resident_us / t.streaming_us)) ** 2 for t in timed)
    return misses, error


def grid_search(timed: list[Timed], top: int = 5) -> list[tuple[int, float, Model]]:
    steps = [i / 40 for i in range(41)]
    found = []
    for gather, per_pass, fixed in itertools.product(steps[:33], steps[1:], steps[::2]):
        model = Model(gather, per_pass, fixed)
        misses, error = score(model, timed)
        found.append((len(misses), error, model))
    found.sort(key=lambda f: (f[0], f[1]))
    return found[:top]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="+", type=Path, help="*-rules-stage.json files")
    ap.add_argument("--top", type=int, default=5, help="grid settings to print")
    args = ap.parse_args(argv)
    timed = load(args.results)
    if not timed:
        print("no size with both tiles timed and correct in these files", file=sys.stderr)
        return 2
    misses, error = score(LIBRARY, timed)
    print(f"library {LIBRARY}: {len(timed) - len(misses)} of {len(timed)} right, log error {error:.3f}")
    for t in misses:
        slower = abs(t.resident_us - t.streaming_us) / min(t.resident_us, t.streaming_us)
        print(f"  miss: R = {t.reqs} x {t.heads} heads, the other tile {100 * slower:.1f} % faster")
    for n_miss, err, model in grid_search(timed, args.top):
        print(f"grid  {model}: {len(timed) - n_miss} right, log error {err:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
