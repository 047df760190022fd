"""The files through which a side of a sequential `ab` and its watcher talk (one place for their names and rules).

A side is given a stop file (`run --ab-stop-file`, set by ab). After each batch it appends its finished samples to
the progress file and then waits until the watcher says it has read them (the seen file: how many of the side's
records it has read) or until the stop file exists. The wait is why the decision falls at a look: without it a
fast side runs past the batch the decision needed before the watcher's next poll, and a short run can end before
the watcher looked at all, so that where an A/B stops depended on timing, not on the data. The watcher writes the
stop file before the seen file, so a side that sees its records acknowledged also sees a decision made on them.

A watcher that stops answering (killed, stuck) must not hang its sides: a side waits at most `timeout_s` once, says
so on stderr, and from then on runs without waiting."""

from __future__ import annotations

import sys
import time
from pathlib import Path

DEFAULT_WAIT_S = 120.0  # a watcher polls every half second; two minutes means it is gone, not slow


def progress_path(stop_file: Path) -> Path:
    return stop_file.with_name(stop_file.name + ".progress.jsonl")


def seen_path(stop_file: Path) -> Path:
    return stop_file.with_name(stop_file.name + ".seen")


def acknowledge(stop_file: Path, records: int) -> None:
    """The watcher: it has read `records` of the side's progress records (written whole, then renamed into place,
    so that a side never reads a half-written number)."""
    path = seen_path(stop_file)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(str(records), encoding="utf-8")
    tmp.replace(path)


def acknowledged(stop_file: Path) -> int:
    try:
        return int(seen_path(stop_file).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return 0


class SideWait:
    """A side's wait for its watcher after each batch (see the module docstring)."""

    def __init__(self, stop_file: Path, timeout_s: float = DEFAULT_WAIT_S, poll_s: float = 0.05) -> None:
        self.stop_file = stop_file
        self.timeout_s = timeout_s
        self.poll_s = poll_s
        self.watcher_gone = False

    def until_read(self, records: int) -> None:
        """Return once the watcher has read `records` records of this side, the stop file exists, or (once) the
        wait timed out."""
        if self.watcher_gone:
            return
        deadline = time.monotonic() + self.timeout_s
        while acknowledged(self.stop_file) < records and not self.stop_file.exists():
            if time.monotonic() > deadline:
                self.watcher_gone = True
                print(
                    f"ab side: the watcher has not read this side's progress in {self.timeout_s:.0f} s; running on "
                    "without waiting for it",
                    file=sys.stderr,
                )
                return
            time.sleep(self.poll_s)
