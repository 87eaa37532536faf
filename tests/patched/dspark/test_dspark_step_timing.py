# SPDX-License-Identifier: Apache-2.0
"""dspark/0002: per-step timing (VLLM_DSPARK_TIMING) on StepTimingCollector.

CPU: fake events (a shared clock) for the aggregation, the log line, the
no-sync polling and the zero-work-when-off property; the DFlash/DSpark
speculator's hooks around its draft forward. With CUDA, a smoke run of the
collector with real CUDA events around a captured CUDA graph replay.
"""

from types import SimpleNamespace
from unittest.mock import Mock, patch

import numpy as np
import pytest
import torch


class FakeClock:
    def __init__(self):
        self.now = 0.0
        self.complete = True  # whether new events complete at once
        self.syncs = 0
        self.events: list[FakeEvent] = []

    def event(self) -> "FakeEvent":
        event = FakeEvent(self)
        self.events.append(event)
        return event


class FakeEvent:
    """A CUDA event on a fake device timeline: record() stamps the clock; the
    event completes when the test says so (query() never blocks)."""

    def __init__(self, clock: FakeClock):
        self.clock = clock
        self.t: float | None = None
        self.done = clock.complete

    def record(self) -> None:
        self.t = self.clock.now
        self.done = self.clock.complete

    def query(self) -> bool:
        return self.done

    def synchronize(self) -> None:
        self.clock.syncs += 1

    def elapsed_time(self, end: "FakeEvent") -> float:
        assert self.t is not None and end.t is not None
        return end.t - self.t


def _step(collector, clock, target, sample, prep, draft, post=0.0, draft_fwd=True):
    clock.now += 1.0  # host gap before the step
    collector.forward_start()
    clock.now += target
    collector.forward_end()
    clock.now += sample
    collector.drafter_start()
    clock.now += prep
    if draft_fwd:
        collector.draft_forward_start()
        clock.now += draft
        collector.draft_forward_end()
    clock.now += post
    collector.drafter_end()


def _collector(log_interval):
    from vllm.v1.worker.gpu import async_utils

    clock = FakeClock()
    collector = async_utils.StepTimingCollector(
        log_interval=log_interval, event_factory=clock.event
    )
    return collector, clock, async_utils


def test_stats_rolling_mean_percentiles_and_log_line():
    from vllm.v1.worker.gpu.async_utils import StepTimingStats

    stats = StepTimingStats(window=4)
    due = [
        stats.add({"target": float(t), "sample": 0.5, "step": float(t) + 1})
        for t in range(1, 7)
    ]
    # A log line every window steps; the window rolls over the oldest steps.
    assert due == [False, False, False, True, False, False]
    summary = stats.summary()
    window = np.array([3.0, 4.0, 5.0, 6.0])
    mean, p50, p90, p99 = summary["target"]
    assert mean == pytest.approx(window.mean())
    assert (p50, p90, p99) == pytest.approx(tuple(np.percentile(window, (50, 90, 99))))
    assert summary["sample"] == pytest.approx((0.5, 0.5, 0.5, 0.5))
    # Components no step reported are left out.
    assert set(summary) == {"target", "sample", "step"}
    line = stats.log_line()
    assert line.startswith("Step timing (ms, mean/p50/p90/p99) over the last 4 steps")
    assert "target 4.500/4.500/5.700/5.970" in line
    assert "sample 0.500/0.500/0.500/0.500" in line
    assert line.index(": target ") < line.index(", sample ") < line.index(", step ")


def test_continuous_timing_logs_components_every_interval():
    collector, clock, async_utils = _collector(log_interval=3)
    with patch.object(async_utils, "logger") as logger:
        for i in range(6):
            _step(collector, clock, 10.0 + i, 0.25, 0.5, 2.0, post=0.1)
    assert logger.info.call_count == 2
    line = logger.info.call_args_list[-1].args[1]
    # Steps 3..5: target 13, 14, 15; step = target + sample + prep + draft + post.
    assert "target 14.000/14.000/14.800/14.980" in line
    assert "sample 0.250/" in line
    assert "draft_prep 0.500/" in line
    assert "draft 2.000/" in line
    assert "step 16.850/" in line


def test_incomplete_steps_wait_without_sync():
    collector, clock, async_utils = _collector(log_interval=2)
    with patch.object(async_utils, "logger") as logger:
        _step(collector, clock, 5.0, 0.1, 0.2, 1.0)
        # The second step is still in flight on the device: it waits.
        clock.complete = False
        _step(collector, clock, 7.0, 0.1, 0.2, 1.0)
        assert logger.info.call_count == 0
        assert len(collector._pending) == 1
        # Once it completes, the next step's drafter_end folds both, in order.
        for event in collector._pending[0].__dict__.values():
            event.done = True
        clock.complete = True
        _step(collector, clock, 9.0, 0.1, 0.2, 1.0)
        assert logger.info.call_count == 1
        assert "target 6.000/" in logger.info.call_args.args[1]
        assert len(collector._pending) == 0
    assert clock.syncs == 0


def test_steps_without_a_draft_forward_keep_target_and_step():
    collector, clock, async_utils = _collector(log_interval=2)
    with patch.object(async_utils, "logger") as logger:
        _step(collector, clock, 3.0, 0.5, 0.2, 0.0, draft_fwd=False)
        _step(collector, clock, 3.0, 0.5, 0.2, 0.0, draft_fwd=False)
    line = logger.info.call_args.args[1]
    assert "target 3.000/" in line and "step 3.700/" in line
    assert "draft" not in line


def test_events_are_recorded_again_not_created_per_step():
    collector, clock, async_utils = _collector(log_interval=100)
    for _ in range(50):
        _step(collector, clock, 1.0, 0.1, 0.1, 1.0)
    # One step's six events, recycled once it is folded.
    assert len(clock.events) == 6
    assert collector._stats.num_steps == 50


def test_off_does_no_work():
    collector, clock, _ = _collector(log_interval=0)
    for _ in range(3):
        _step(collector, clock, 10.0, 0.1, 0.2, 1.0)
    assert clock.events == []
    assert not collector._pending


def test_collect_block_still_serves_adaptive_verification():
    # Profiling (collect) keeps its sync-on-exit samples and does not feed the
    # rolling stats, with continuous timing on or off.
    for interval in (0, 2):
        collector, clock, async_utils = _collector(log_interval=interval)
        batch = SimpleNamespace(num_tokens=12, num_reqs=2)
        with (
            patch.object(async_utils, "logger") as logger,
            collector.collect() as samples,
        ):
            for _ in range(2):
                collector.record_batch(batch, full_cudagraph=True)
                _step(collector, clock, 4.0, 0.5, 0.5, 1.5)
        assert [(s.forward_ms, s.drafter_ms) for s in samples] == [(4.0, 2.0)] * 2
        assert samples[0].num_target_tokens == 12 and samples[0].full_cudagraph
        assert logger.info.call_count == 0
        assert not collector._pending


def test_env_var_registered_and_not_a_compile_factor(monkeypatch):
    import vllm.envs as envs

    monkeypatch.setenv("VLLM_DSPARK_TIMING", "1")
    assert envs.VLLM_DSPARK_TIMING is True
    monkeypatch.setenv("VLLM_DSPARK_TIMING", "0")
    assert envs.VLLM_DSPARK_TIMING is False
    assert "VLLM_DSPARK_TIMING" in envs.environment_variables
    assert "VLLM_DSPARK_TIMING" not in envs.compile_factors()


@pytest.mark.parametrize("full_graph", [True, False])
def test_dflash_propose_times_its_draft_forward(full_graph):
    """The DFlash/DSpark speculator brackets the draft forward (FULL graph
    replay or eager) with the collector's draft_forward events."""
    from vllm.config.compilation import CUDAGraphMode
    from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor
    from vllm.v1.worker.gpu.spec_decode.dflash import speculator as dflash

    order = []
    timing = Mock()
    timing.draft_forward_start.side_effect = lambda: order.append("start")
    timing.draft_forward_end.side_effect = lambda: order.append("end")
    desc = BatchExecutionDescriptor(
        cg_mode=CUDAGraphMode.FULL if full_graph else CUDAGraphMode.NONE,
        num_tokens=10,
        num_reqs=2,
    )
    draft = SimpleNamespace(
        step_timing=timing,
        num_query_per_req=5,
        num_speculative_steps=3,
        max_model_len=128,
        pcp_manager=None,
        draft_kv_cache_group_id=0,
        draft_kv_cache_group_ids=[],
        query_cudagraph_manager=SimpleNamespace(
            run_fullgraph=lambda d: order.append("graph")
        ),
        dp_size=1,
        dp_rank=0,
        vllm_config=SimpleNamespace(parallel_config=None),
        supports_decode_metadata_update=True,
        _prepare_graph_replay=lambda *a: order.append("prep"),
        _map_kernel_block_tables=lambda: None,
        _store_hidden_states=lambda *a: order.append("prep"),
        prepare_context_anchor=lambda *a: None,
        _precompute_context_kv=lambda *a: None,
        _build_uniform_attn_metadata=lambda **kw: {},
        _group_causal=False,
        block_tables=SimpleNamespace(slot_mappings=torch.zeros(1, 16)),
        kv_cache_config=None,
        _prepare_eplb_forward=lambda n: None,
        _generate_draft=lambda *a, **kw: order.append("eager"),
        draft_tokens=torch.zeros(4, 3, dtype=torch.int64),
    )
    input_batch = SimpleNamespace(
        num_reqs=2,
        num_tokens=8,
        seq_lens_cpu_upper_bound=torch.tensor([20, 30]),
        query_start_loc=None,
    )
    with (
        patch.object(dflash, "dispatch_cg_and_sync_dp", return_value=(desc, None)),
        patch.object(dflash, "build_slot_mappings_by_layer", return_value={}),
    ):
        dflash.DFlashSpeculator.propose(
            draft, input_batch, {}, {}, None, None, *([None] * 6)
        )
    forward = "graph" if full_graph else "eager"
    assert order == ["prep", "start", forward, "end"]


def test_real_cuda_events_smoke():
    """Real CUDA events around eager work and a CUDA graph replay: the polled,
    never synchronized timings are positive and agree with the device."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    from vllm.v1.worker.gpu import async_utils

    x = torch.randn(2048, 2048, device="cuda")
    static_out = torch.empty_like(x)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            static_out.copy_(x @ x @ x)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(8):
            static_out.copy_(x @ static_out)

    collector = async_utils.StepTimingCollector(log_interval=20)
    lines = []
    with patch.object(async_utils, "logger") as logger:
        logger.info.side_effect = lambda fmt, line: lines.append(line)
        for _ in range(60):
            collector.forward_start()
            y = x @ x  # "target"
            collector.forward_end()
            y = y.relu()  # "sample"
            collector.drafter_start()
            z = x + 1  # "prep"
            collector.draft_forward_start()
            graph.replay()  # "draft" (FULL graph)
            collector.draft_forward_end()
            collector.drafter_end()
        torch.cuda.synchronize()
        collector.forward_start()
        collector.forward_end()
        collector.drafter_start()
        collector.drafter_end()
    del y, z
    assert len(lines) >= 2, lines
    stats = collector._stats.summary()
    for name in ("target", "sample", "draft_prep", "draft", "step"):
        assert stats[name][0] >= 0.0
    # The graph replays 8 matmuls, the target 1: the draft must read longer.
    assert stats["draft"][0] > 3 * stats["target"][0]
    assert stats["step"][0] >= stats["draft"][0]
    # Cross-check the graph time with a separately timed replay.
    start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
    start.record()
    graph.replay()
    end.record()
    end.synchronize()
    assert stats["draft"][1] == pytest.approx(start.elapsed_time(end), rel=0.5)
    print("\n".join(lines))
