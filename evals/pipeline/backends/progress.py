"""Progress of a run as plain lines on stderr, for a backend with no terminal (a torchrun job's rank 0, CI logs).
The command's own progress draws a live bar on a terminal and uses these lines elsewhere."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable


def rate_text(stats) -> str:
    """Tokens per second, the acceptance length under spec-dec, and the score so far when there is one."""
    text = f"{stats.output_tokens_per_s:.0f} tok/s"
    if stats.acceptance and stats.acceptance.get("num_cycles"):
        text += f", AL {stats.acceptance['acceptance_length']:.2f}"
    if getattr(stats, "running_score", None) is not None:
        text += f", score so far {stats.running_score:.1f}"
    return text


def plain_progress(every_s: float = 15.0) -> Callable:
    """A progress callback (done, total, stats) that prints one line every `every_s` seconds and at the end."""
    last = [time.monotonic()]

    def update(done: int, total: int, stats) -> None:
        now = time.monotonic()
        if now - last[0] < every_s and done != total:
            return
        last[0] = now
        eta = stats.elapsed_s * (total - done) / done if done else float("nan")
        print(
            f"generating: {done}/{total} samples, {rate_text(stats)}, {stats.elapsed_s:.0f} s elapsed, eta {eta:.0f} s",
            file=sys.stderr,
            flush=True,
        )

    return update
