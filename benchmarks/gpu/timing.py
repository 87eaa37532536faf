# SPDX-License-Identifier: Apache-2.0
"""Timings that can be compared: warm-up, many interleaved repetitions, min/median/spread,
and a same-code control (A vs A) beside every ratio.

``compare(fns, control=NAME)`` times ``fns`` plus a second, separate copy of fns[NAME]
("NAME~A") in rounds; each round times every variant once (``inner`` back-to-back calls
between two CUDA events, or one CUDA-graph replay holding ``inner`` calls), in an order
that rotates from round to round, so slow phases of the machine hit every variant alike.
``ratio(stats, a, b)`` is median(a)/median(b), and the control ratio NAME~A / NAME is
the noise floor of the same run: a ratio within it says "no difference measured".
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch


def _stats(samples: list[float]) -> dict:
    q = statistics.quantiles(samples, n=10) if len(samples) >= 2 else [samples[0]] * 9
    return {"min": round(min(samples), 3), "median": round(statistics.median(samples), 3),
            "p10": round(q[0], 3), "p90": round(q[-1], 3), "n": len(samples)}


def _graph(fn: Callable, inner: int):
    """A CUDA graph of `inner` calls of fn, or None when fn cannot be captured."""
    try:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(inner):
                fn()
        graph.replay()
        torch.cuda.synchronize()
        return graph
    except Exception:  # noqa: BLE001 - host syncs or CPU work inside fn: time it eagerly
        torch.cuda.synchronize()
        return None


def compare(fns: dict[str, Callable], control: str, *, rounds: int = 30, inner: int = 20,
            warmup: int = 10, graphs: bool = False) -> dict:
    """us per call of every variant: {"variants": {name: stats}, "mode": "eager"|"graph"}."""
    fns = dict(fns)
    fns[f"{control}~A"] = lambda f=fns[control]: f()  # same code, its own entry in the rotation
    cuda = torch.cuda.is_available()
    if not cuda:
        rounds, inner, warmup = 2, 1, 1
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    mode = "eager"
    runners = dict(fns)
    if cuda and graphs:
        captured = {name: _graph(fn, inner) for name, fn in fns.items()}
        if all(g is not None for g in captured.values()):
            mode = "graph"
            runners = {name: (lambda g=g: g.replay()) for name, g in captured.items()}
    names = list(runners)
    samples: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        order = names[r % len(names):] + names[: r % len(names)]
        for name in order:
            run = runners[name]
            if not cuda:
                t = time.perf_counter()
                run()
                samples[name].append((time.perf_counter() - t) * 1e6)
                continue
            calls = 1 if mode == "graph" else inner
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            for _ in range(calls):
                run()
            end.record()
            end.synchronize()
            samples[name].append(start.elapsed_time(end) * 1000 / inner)
    return {"mode": mode, "rounds": rounds, "inner": inner, "control": control,
            "variants": {n: _stats(s) for n, s in samples.items()}}


def ratio(result: dict, a: str, b: str) -> dict:
    """a over b by median and by min, with the run's A-vs-A control beside it."""
    v, c = result["variants"], result["control"]
    return {"median": round(v[a]["median"] / v[b]["median"], 3),
            "min": round(v[a]["min"] / v[b]["min"], 3),
            "control_A_vs_A_median": round(v[f"{c}~A"]["median"] / v[c]["median"], 3),
            "control_A_vs_A_min": round(v[f"{c}~A"]["min"] / v[c]["min"], 3)}
