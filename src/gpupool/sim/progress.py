"""The progress bar of the experiment commands (``sim openb``, ``sim openb-mix``): one tick per
finished experiment, on stderr, naming the last one; a no-op when off."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

__all__ = ["experiment_bar"]

T = TypeVar("T")


@contextmanager
def experiment_bar(
    enabled: bool, total: int, title: str, label: Callable[[T], str]
) -> Iterator[Callable[[T], None]]:
    """Yields ``tick(result)``; ``label(result)`` says which experiment just finished."""
    if not enabled:
        yield lambda _result: None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = (
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("elapsed"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        TextColumn("{task.fields[last]}"),
    )
    with Progress(*columns, console=Console(file=sys.stderr)) as bar:
        task = bar.add_task(title, total=total, last="")

        def tick(result: T) -> None:
            bar.update(task, advance=1, last=f"last: {label(result)}")

        yield tick
