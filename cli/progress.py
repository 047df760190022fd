"""Progress display on stderr (rich), so stdout stays clean for JSON."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

stderr = Console(stderr=True)


def _rate(stats) -> str:
    text = f"{stats.output_tokens_per_s:.0f} tok/s"
    if stats.acceptance and stats.acceptance.get("num_cycles"):
        text += f", AL {stats.acceptance['acceptance_length']:.2f}"
    if getattr(stats, "running_score", None) is not None:
        text += f", score so far {stats.running_score:.1f}"
    return text


@contextmanager
def generation_progress(total: int, enabled: bool = True) -> Iterator[Callable | None]:
    """A live bar on a terminal; on a pipe (a torchrun job's rank 0, CI logs) a plain line every 15 s."""
    if not enabled:
        yield None
        return
    if not stderr.is_terminal:
        yield _plain_progress()
        return
    columns = (
        TextColumn("generating"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
    )  # fmt: skip
    with Progress(*columns, console=stderr, transient=True) as bar:
        task = bar.add_task("generate", total=total, rate="")

        def update(done: int, total_: int, stats) -> None:
            bar.update(task, completed=done, total=total_, rate=_rate(stats))

        yield update


def _plain_progress(every_s: float = 15.0) -> Callable:
    last = [time.monotonic()]

    def update(done: int, total: int, stats) -> None:
        now = time.monotonic()
        if now - last[0] < every_s and done != total:
            return
        last[0] = now
        eta = stats.elapsed_s * (total - done) / done if done else float("nan")
        print(f"generating: {done}/{total} samples, {_rate(stats)}, {stats.elapsed_s:.0f} s elapsed, "
              f"eta {eta:.0f} s", file=sys.stderr, flush=True)  # fmt: skip

    return update
