"""Structured events: one dict per event, always with `ts`, `rank` and `type` (docs/architecture.md, "Events").

Each rank keeps its own log (and, when given a path, appends JSON lines to its file); rank 0 merges them.

A server writes its events into its own log as event lines (`event_line`): EVENT_LINE_PREFIX, then the event as one
JSON object, on one line. The prefix and the JSON shape are a stable format: `specdec-eval serve` writes them, and
the log reader's signature table for our engine reads them back (`parse_event_line`)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from ..event_types import FAILING_EVENTS  # events that fail a run whatever its accuracy (docs/architecture.md)

EVENT_LINE_PREFIX = "specdec-eval event: "


class EventLog:
    def __init__(self, rank: int = 0, path: str | Path | None = None) -> None:
        self.rank = rank
        self.path = Path(path) if path is not None else None
        self.events: list[dict[str, Any]] = []

    def emit(self, type: str, **fields: Any) -> dict[str, Any]:
        event = {"ts": round(time.time(), 6), "rank": self.rank, "type": type, **fields}
        self.events.append(event)
        if self.path is not None:
            with self.path.open("a", encoding="utf-8") as f:
                f.write(json.dumps(event) + "\n")
        return event

    def of_type(self, type: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == type]

    def counts(self) -> dict[str, int]:
        return count_events(self.events)


def rank_events_path(path: str | None, ranks: int) -> str | None:
    """The events file of each rank of a multi-process engine: events.rank{rank}.jsonl beside the one named (the
    engine formats {rank}); one process writes the file itself."""
    if not path or ranks == 1:
        return path
    p = Path(path)
    return str(p.with_name(f"{p.stem}.rank{{rank}}{p.suffix or '.jsonl'}"))


def merge_event_files(paths: list[str | Path]) -> list[dict[str, Any]]:
    """Rank 0's view: every rank's JSON lines, in time order (rank breaks ties). A torn last line from a rank
    that died mid-write is skipped, never fatal."""
    events: list[dict[str, Any]] = []
    for path in paths:
        p = Path(path)
        if not p.exists():
            continue
        for line in p.read_text(encoding="utf-8").splitlines():
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return sorted(events, key=lambda e: (e.get("ts", 0.0), e.get("rank", 0)))


def count_events(events: list[dict[str, Any]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for e in events:
        out[e["type"]] = out.get(e["type"], 0) + 1
    return out


def failing_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Events that fail a run on their own: any spec_state_leak, any unrecovered request_failed."""
    return [e for e in events if e["type"] in FAILING_EVENTS]


def event_line(event: dict[str, Any]) -> str:
    """One event as a log line: EVENT_LINE_PREFIX and the event's JSON (keys sorted, no newline inside)."""
    return EVENT_LINE_PREFIX + json.dumps(event, sort_keys=True, default=str)


def parse_event_line(text: str) -> dict[str, Any] | None:
    """The event an event line holds, wherever the line's prefix starts in `text` (a log may put its own prefix
    before it) and whatever follows the JSON object (another thread's output may land on the same line); None when
    `text` holds none, or a JSON object without a `type`."""
    at = text.find(EVENT_LINE_PREFIX)
    if at < 0:
        return None
    try:
        event, _ = json.JSONDecoder().raw_decode(text, at + len(EVENT_LINE_PREFIX))
    except ValueError:
        return None
    return event if isinstance(event, dict) and isinstance(event.get("type"), str) else None
