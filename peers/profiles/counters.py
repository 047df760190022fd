"""Cumulative acceptance numbers as one server reports them, in one shape (`Counters`), whichever format the server
exports them in: what an engine profile's metrics reader returns, and what `server.metrics` turns into a run's
delta."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Counters:
    """Cumulative acceptance numbers as one server reports them; None where it reports no such number."""

    source: str  # e.g. "vllm names on /metrics"
    cycles: float | None = None
    draft_tokens: float | None = None
    accepted: float | None = None  # accepted drafts, bonus excluded
    accepted_per_pos: dict[int, float] = field(default_factory=dict)
    drafted_per_pos: dict[int, float] = field(default_factory=dict)
    average_length: float | None = None  # a server-lifetime AL without counts (SGLang)
    drains: bool = False  # every read returns only what happened since the previous read (TRT-LLM JSON)
