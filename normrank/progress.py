"""The one progress bar every long step shows (encoding, the probe): description, bar, done/total,
elapsed and remaining time, on stderr so that stdout stays for results."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["progress_bar"]


def progress_bar(*, enabled: bool = True, get_time: Callable[[], float] | None = None) -> Any:
    """A ``rich.progress.Progress`` (not started). Elapsed time is shown beside the remaining
    time because remaining time alone reads 0:00:00 once a bar is done, whatever the run took."""
    from rich.console import Console
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
        console=Console(stderr=True),
        disable=not enabled,
        get_time=get_time,
    )
