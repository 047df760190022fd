"""Acceptance metrics, with the conventions spelled out (shared/reference/eagle3.md §10):

- a *draft cycle* is one target step of a generation request that carried K draft tokens;
- acceptance length (AL) = 1 + accepted drafts / cycles: tokens per target step, **bonus token included**;
- acceptance rate = accepted drafts / drafted tokens;
- per-position rate i = cycles whose draft i was accepted / cycles (they sum to AL - 1).
Context steps are not cycles (they carry no drafts)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class AcceptanceStats:
    max_draft_len: int
    num_cycles: int = 0
    num_draft_tokens: int = 0
    num_accepted: int = 0
    accepted_per_position: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.accepted_per_position:
            self.accepted_per_position = [0] * self.max_draft_len

    def record(self, num_drafts: int, num_accepted: int) -> None:
        self.num_cycles += 1
        self.num_draft_tokens += num_drafts
        self.num_accepted += num_accepted
        for i in range(num_accepted):
            self.accepted_per_position[i] += 1

    def merge(self, other: AcceptanceStats) -> None:
        self.num_cycles += other.num_cycles
        self.num_draft_tokens += other.num_draft_tokens
        self.num_accepted += other.num_accepted
        for i, n in enumerate(other.accepted_per_position):
            self.accepted_per_position[i] += n

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> AcceptanceStats:
        """Inverse of to_dict (exact: the counts travel, not the rounded rates)."""
        return cls(d["max_draft_len"], d["num_cycles"], d["num_draft_tokens"], d["num_accepted_drafts"],
                   list(d["accepted_per_position"]))  # fmt: skip

    @property
    def acceptance_length(self) -> float:
        return 1.0 + self.num_accepted / self.num_cycles if self.num_cycles else 0.0

    @property
    def acceptance_rate(self) -> float:
        return self.num_accepted / self.num_draft_tokens if self.num_draft_tokens else 0.0

    @property
    def per_position_rate(self) -> list[float]:
        return [n / self.num_cycles if self.num_cycles else 0.0 for n in self.accepted_per_position]

    def to_dict(self) -> dict[str, Any]:
        return {
            "acceptance_length": round(self.acceptance_length, 4),
            "acceptance_rate": round(self.acceptance_rate, 4),
            "per_position_rate": [round(x, 4) for x in self.per_position_rate],
            "num_cycles": self.num_cycles,
            "num_draft_tokens": self.num_draft_tokens,
            "num_accepted_drafts": self.num_accepted,
            "accepted_per_position": list(self.accepted_per_position),
            "max_draft_len": self.max_draft_len,
            "note": "acceptance_length includes the bonus token",
        }
