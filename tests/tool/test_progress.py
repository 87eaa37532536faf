"""Progress of long steps: a bar on a terminal, plain lines in logs, nothing when asked."""

from __future__ import annotations

import pytest
from patchstack import progress


def feed(label: str, total: int | None, chunks: int = 20) -> None:
    with progress.tracker(label, total) as bar:
        for _ in range(chunks):
            bar.update(1 << 20)


def test_a_log_gets_a_plain_line_per_tenth(monkeypatch, capsys):
    monkeypatch.delenv("VLLM_OVERLAY_PROGRESS", raising=False)  # stderr is not a terminal under pytest
    feed("downloading x.tar.gz", 20 << 20)
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "downloading x.tar.gz: 1 MiB of 20 MiB (5%)"
    assert lines[-1] == "downloading x.tar.gz: 20 MiB of 20 MiB (100%)"
    assert 10 <= len(lines) <= 12 and not any("\r" in ln for ln in lines)


def test_unknown_total_still_reports(monkeypatch, capsys):
    monkeypatch.setenv("VLLM_OVERLAY_PROGRESS", "lines")
    feed("importing x", None, chunks=3)
    err = capsys.readouterr().err
    assert "importing x: 3 MiB done" in err


@pytest.mark.parametrize("mode,expect", [("bar", "\r"), ("off", "")])
def test_terminal_bar_and_off(monkeypatch, capsys, mode, expect):
    monkeypatch.setenv("VLLM_OVERLAY_PROGRESS", mode)
    feed("downloading y", 20 << 20)
    err = capsys.readouterr().err
    if mode == "bar":
        assert "downloading y" in err and "100%" in err and "\r" in err  # a tqdm bar, redrawn in place
    else:
        assert err == expect
