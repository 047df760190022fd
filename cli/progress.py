"""Progress display on stderr (rich), so stdout stays clean for JSON."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from ..evals.pipeline.backends.progress import plain_progress, rate_text

stderr = Console(stderr=True)


@contextmanager
def generation_progress(total: int, enabled: bool = True) -> Iterator[Callable | None]:
    """A live bar on a terminal; on a pipe (a torchrun job's rank 0, CI logs) a plain line every 15 s."""
    if not enabled:
        yield None
        return
    if not stderr.is_terminal:
        yield plain_progress()
        return
    columns = (
        TextColumn("generating"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=stderr, transient=True) as bar:
        task = bar.add_task("generate", total=total, rate="")

        def update(done: int, total_: int, stats) -> None:
            bar.update(task, completed=done, total=total_, rate=rate_text(stats))

        yield update
