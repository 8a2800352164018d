"""The one progress display every long step shows (encoding, the probe, training, HNSW rebuilds),
on stderr so that stdout stays for results.

On a terminal it is rich's bar: description, bar, done/total, elapsed and remaining time. Where
stderr is not a terminal (a file, a pipe, a CI log, ``nohup``, ``tee``, a notebook) rich would
draw nothing until the end, so the same fields go out as plain lines at a steady pace instead
(``settings.PROGRESS_LINE_SECONDS`` / ``PROGRESS_LINE_FRACTION``): a log shows a step is alive.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO

from normrank import settings

__all__ = ["PlainProgress", "progress_bar", "stderr_console"]


def stderr_console(file: TextIO | None = None) -> Any:
    """A ``rich.console.Console`` on stderr (or ``file``) for a command's own lines. On a terminal
    as rich makes it; elsewhere no wrapping at 80 columns (rich's width for a file: one result
    stays one line), no colours or escape codes, no highlighting."""
    from rich.console import Console

    console = Console(file=file, stderr=file is None)
    if console.is_terminal:
        return console
    return Console(file=file, stderr=file is None, soft_wrap=True, no_color=True, highlight=False)


def progress_bar(
    *,
    enabled: bool = True,
    get_time: Callable[[], float] | None = None,
    file: TextIO | None = None,
    transient: bool = False,
) -> Any:
    """A progress display (not started; use it as a context manager), with rich's ``Progress``
    API as used here: ``add_task``, ``advance``, ``update``, ``remove_task``.

    On a terminal a ``rich.progress.Progress`` (elapsed time shown beside the remaining time,
    because remaining time alone reads 0:00:00 once a bar is done, whatever the run took);
    elsewhere a :class:`PlainProgress`. ``file`` defaults to stderr; ``get_time`` is the clock
    (seconds; tests pass a fake one); ``transient`` clears a terminal bar when it stops (a log
    keeps its lines)."""
    console = stderr_console(file)
    if not console.is_terminal:
        return PlainProgress(
            file=file if file is not None else sys.stderr, get_time=get_time, enabled=enabled
        )
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    return Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
        console=console,
        disable=not enabled,
        get_time=get_time,
        transient=transient,
    )


@dataclass
class _Task:
    description: str
    total: float | None
    started: float
    completed: float = 0.0
    last_line: float = 0.0  # clock reading at this task's last line (its start before any)
    next_fraction: float = 0.0  # the done fraction whose crossing prints the next line
    printed: tuple[float, str] | None = None  # (done, description) as last printed


class PlainProgress:
    """Progress as plain lines, for a stream that is not a terminal. A task prints a line when
    ``settings.PROGRESS_LINE_SECONDS`` have passed since its last one, or when it has crossed
    another ``settings.PROGRESS_LINE_FRACTION`` of its total (lines at least
    ``settings.PROGRESS_LINE_MIN_SECONDS`` apart, so a quick step does not fill a log), and one
    when it completes or the display stops::

        encoding (all-MiniLM-L6-v2): 1,280/5,183 (25%), elapsed 0:03:12, remaining 0:09:36

    The settings are read when the display is made, so they can be changed at run time."""

    def __init__(
        self, *, file: TextIO, get_time: Callable[[], float] | None = None, enabled: bool = True
    ) -> None:
        self.file = file
        self.get_time = get_time if get_time is not None else time.monotonic
        self.enabled = enabled
        self.every_seconds = float(settings.PROGRESS_LINE_SECONDS)
        self.every_fraction = float(settings.PROGRESS_LINE_FRACTION)
        self.min_seconds = float(settings.PROGRESS_LINE_MIN_SECONDS)
        self._tasks: dict[int, _Task] = {}
        self._next_id = 0

    def __enter__(self) -> PlainProgress:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Nothing to draw until a task moves (rich's ``start`` begins its refresh thread)."""

    def stop(self) -> None:
        """A last line for each task whose state since its last line has not been printed."""
        for task in self._tasks.values():
            if task.printed != (task.completed, task.description):
                self._print(task, self.get_time())

    def add_task(self, description: str, total: float | None = 100.0, completed: float = 0) -> int:
        now = self.get_time()
        task_id, self._next_id = self._next_id, self._next_id + 1
        self._tasks[task_id] = _Task(description, total, now, float(completed), last_line=now)
        self._tasks[task_id].next_fraction = self._next_step(self._tasks[task_id])
        return task_id

    def remove_task(self, task_id: int) -> None:
        del self._tasks[task_id]

    def advance(self, task_id: int, advance: float = 1) -> None:
        self.update(task_id, advance=advance)

    def update(
        self,
        task_id: int,
        *,
        advance: float | None = None,
        completed: float | None = None,
        total: float | None = None,
        description: str | None = None,
    ) -> None:
        task = self._tasks[task_id]
        if total is not None:
            task.total = total
        if completed is not None:
            task.completed = float(completed)
        if advance is not None:
            task.completed += advance
        if description is not None:
            task.description = description
        now = self.get_time()
        finished = task.total is not None and task.completed >= task.total
        if finished:
            if task.printed != (task.completed, task.description):
                self._print(task, now)
            return
        if now - task.last_line < self.min_seconds:
            return
        fraction = task.completed / task.total if task.total else None
        if now - task.last_line >= self.every_seconds or (
            fraction is not None and fraction >= task.next_fraction
        ):
            self._print(task, now)

    def _next_step(self, task: _Task) -> float:
        """The next multiple of ``every_fraction`` above the task's done fraction (> 1: none)."""
        if not task.total or self.every_fraction <= 0:
            return float("inf")
        steps = int(task.completed / task.total / self.every_fraction + 1e-9) + 1
        return steps * self.every_fraction

    def _print(self, task: _Task, now: float) -> None:
        task.last_line, task.printed = now, (task.completed, task.description)
        task.next_fraction = self._next_step(task)
        if not self.enabled:
            return
        elapsed = max(0.0, now - task.started)
        done = f"{task.completed:,.0f}"
        if task.total:
            fraction = min(task.completed / task.total, 1.0)
            done += f"/{task.total:,.0f} ({fraction:.0%})"
            left = elapsed * (task.total - task.completed) / task.completed if task.completed else None
            remaining = _clock(max(left, 0.0)) if left is not None else "-:--:--"
            line = f"{task.description}: {done}, elapsed {_clock(elapsed)}, remaining {remaining}"
        else:
            line = f"{task.description}: {done}, elapsed {_clock(elapsed)}"
        print(line, file=self.file, flush=True)


def _clock(seconds: float) -> str:
    s = round(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"
