"""Progress a user sees wherever the output goes (issue 49): rich's bar on a terminal; in a file,
a pipe or a CI log, plain lines at a steady pace with done/total, elapsed and remaining time; and
the commands' own lines kept whole (no wrapping at 80 columns) in a file."""

from __future__ import annotations

import io
import re
import types
from pathlib import Path

import numpy as np
import pytest

from normrank import settings
from normrank.progress import PlainProgress, progress_bar, stderr_console

LINE = re.compile(
    r"^(?P<label>.+): (?P<done>[\d,]+)/(?P<total>[\d,]+) \(\d+%\), "
    r"elapsed (?P<elapsed>\d+:\d\d:\d\d), remaining (?:\d+:\d\d:\d\d|-:--:--)$"
)


@pytest.fixture(autouse=True)
def no_forced_terminal(monkeypatch):
    """rich takes these to mean a terminal whatever the stream: the tests choose the stream."""
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(name, raising=False)


class FakeClock:
    """Seconds that pass only when the test says so (no sleeping)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class TerminalStringIO(io.StringIO):
    def isatty(self) -> bool:
        return True


def _seconds(clock: str) -> int:
    h, m, s = (int(x) for x in clock.split(":"))
    return h * 3600 + m * 60 + s


def test_encoding_6000_texts_with_stderr_to_a_file_prints_lines_while_it_runs(tmp_path, monkeypatch):
    """The encoders' own loop (TorchEncoder.encode), stderr a real file: at least three lines
    before the last batch, each with done/total, elapsed and remaining; no escape codes."""
    torch = pytest.importorskip("torch")
    from normrank.encoders.base import TorchEncoder

    clock = FakeClock()
    monkeypatch.setattr("normrank.progress.time", types.SimpleNamespace(monotonic=clock))

    class SlowFakeEncoder(TorchEncoder):
        name, kind, dim = "fake", "fake", 4

        def __init__(self) -> None:
            self.torch_module = torch.nn.Identity()

        def embed_tensor(self, texts: list[str]) -> torch.Tensor:
            clock.now += 0.8  # a batch of 64 takes 0.8 s: 75 s for 6,000 texts
            return torch.tensor([[float(len(t)), 1.0, 2.0, 3.0] for t in texts])

    log = tmp_path / "stderr.log"
    with log.open("w") as stderr:
        monkeypatch.setattr("sys.stderr", stderr)
        emb = SlowFakeEncoder().encode([f"text {i}" for i in range(6000)], batch_size=64, show_progress=True)
    assert emb.shape == (6000, 4) and np.isfinite(emb).all()
    text = log.read_text()
    assert "\x1b" not in text and "\r" not in text, text  # no escape codes, no carriage returns
    lines = text.splitlines()
    assert lines and all(LINE.match(line) for line in lines), text
    running = [line for line in lines if LINE.match(line)["done"] != "6,000"]
    assert len(running) >= 3, text
    last = LINE.match(lines[-1])
    assert last["label"] == "encoding (fake)" and last["done"] == last["total"] == "6,000"
    assert _seconds(last["elapsed"]) == 75  # 94 batches of 0.8 s


def test_plain_lines_come_at_the_set_pace_in_seconds_and_in_fractions(monkeypatch):
    """A line every PROGRESS_LINE_SECONDS when the step is slow; one each PROGRESS_LINE_FRACTION
    when it is quick, but never two within PROGRESS_LINE_MIN_SECONDS; one when it completes."""
    monkeypatch.setattr(settings, "PROGRESS_LINE_SECONDS", 10.0)
    monkeypatch.setattr(settings, "PROGRESS_LINE_FRACTION", 0.25)
    monkeypatch.setattr(settings, "PROGRESS_LINE_MIN_SECONDS", 2.0)
    clock, out = FakeClock(), io.StringIO()
    with PlainProgress(file=out, get_time=clock) as bar:
        slow = bar.add_task("slow", total=1000)
        for _ in range(65):  # 0.1 % a second: no quarter crossed in 65 s
            clock.now += 1.0
            bar.advance(slow)
        quick = bar.add_task("quick", total=100)
        for _ in range(100):  # 1 % every 0.1 s: the quarters come before 10 s
            clock.now += 0.1
            bar.advance(quick)
    lines = out.getvalue().splitlines()
    slow_lines = [line for line in lines if line.startswith("slow:")]
    assert [LINE.match(line)["elapsed"] for line in slow_lines] == [
        "0:00:10", "0:00:20", "0:00:30", "0:00:40", "0:00:50", "0:01:00", "0:01:15",
    ]  # fmt: skip
    assert slow_lines[-1].startswith("slow: 65/1,000 (6%)")  # stopped unfinished: its state said
    quick_lines = [line for line in lines if line.startswith("quick:")]
    assert [LINE.match(line)["done"] for line in quick_lines] == ["25", "50", "75", "100"]
    assert quick_lines[-1].endswith("elapsed 0:00:10, remaining 0:00:00")


def test_a_quick_step_prints_one_line_not_ten() -> None:
    clock, out = FakeClock(), io.StringIO()
    with PlainProgress(file=out, get_time=clock) as bar:
        task = bar.add_task("pages", total=10)
        for _ in range(10):
            clock.now += 0.01
            bar.advance(task)
    assert out.getvalue().splitlines() == ["pages: 10/10 (100%), elapsed 0:00:00, remaining 0:00:00"]


def test_description_updates_and_removed_tasks_as_rich_has_them() -> None:
    clock, out = FakeClock(), io.StringIO()
    with PlainProgress(file=out, get_time=clock) as bar:
        gone = bar.add_task("pair features", total=5)
        bar.remove_task(gone)  # not shown again
        task = bar.add_task("train", total=3)
        clock.now += 20
        bar.update(task, advance=1, description="train loss 0.5")
    assert out.getvalue().splitlines() == ["train loss 0.5: 1/3 (33%), elapsed 0:00:20, remaining 0:00:40"]


def test_a_disabled_display_prints_nothing() -> None:
    out = io.StringIO()
    with progress_bar(enabled=False, file=out) as bar:
        bar.advance(bar.add_task("x", total=2), 2)
    assert out.getvalue() == ""


def test_a_terminal_keeps_riches_bar() -> None:
    from rich.progress import Progress

    assert isinstance(progress_bar(file=TerminalStringIO()), Progress)
    assert isinstance(progress_bar(file=io.StringIO()), PlainProgress)


def test_a_long_line_stays_one_line_in_a_file() -> None:
    out = io.StringIO()
    stderr_console(out).print("[green]word[/green] " * 60)
    assert out.getvalue() == "word " * 60 + "\n"  # no wrap at 80 columns, no colour codes


def test_hnsw_rebuild_progress_shows_in_a_log(tmp_path: Path, monkeypatch) -> None:
    """A slow rebuild (50k rows or more into an HNSW graph) said nothing where stderr was not a
    terminal; it now prints its lines there too (the graph is a stand-in: only add_with_ids)."""
    from normrank.index.wrap import _add_with_progress

    clock = FakeClock()
    monkeypatch.setattr("normrank.progress.time", types.SimpleNamespace(monotonic=clock))
    added: list[int] = []

    class Graph:
        def add_with_ids(self, x, ids) -> None:
            clock.now += 20.0
            added.append(len(ids))

    log = tmp_path / "stderr.log"
    with log.open("w") as stderr:
        monkeypatch.setattr("sys.stderr", stderr)
        _add_with_progress(Graph(), np.zeros((60_000, 2), np.float32), np.arange(60_000), slow=True)
    assert added == [20_000, 20_000, 20_000]
    lines = log.read_text().splitlines()
    assert [LINE.match(line)["done"] for line in lines] == ["20,000", "40,000", "60,000"], lines
