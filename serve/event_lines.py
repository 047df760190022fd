"""The server's events in its own log: every event the engine emits, written once to stderr as an event line
(`specdec-eval event: ` and the event's JSON on one line), as soon as the engine loop sees it. A run that reads this
server's log (`run --server-log`) reads them back as events of its own, warmup included: the log is where a server's
events reach a client."""

from __future__ import annotations

import json
import sys
from typing import Any, TextIO

from ..workers.events import event_line


class EventLines:
    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream
        self._written: set[str] = set()  # by content: a torchrun engine re-reads its ranks' events every time

    def write_new(self, events: list[dict[str, Any]]) -> int:
        """Write the events not written yet; returns how many were."""
        stream = self._stream or sys.stderr
        written = 0
        for event in events:
            key = json.dumps(event, sort_keys=True, default=str)
            if key in self._written:
                continue
            self._written.add(key)
            stream.write(event_line(event) + "\n")  # one write: another thread's log line cannot split it
            stream.flush()
            written += 1
        return written
