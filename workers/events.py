"""Structured events: one dict per event, always with `ts`, `rank` and `type` (DESIGN.md, "Events").

Each rank keeps its own log (and, when given a path, appends JSON lines to its file); rank 0 merges them."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any


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
        out: dict[str, int] = {}
        for e in self.events:
            out[e["type"]] = out.get(e["type"], 0) + 1
        return out
