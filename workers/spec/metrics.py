"""Acceptance metrics, with the conventions spelled out:

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
        return cls(
            d["max_draft_len"],
            d["num_cycles"],
            d["num_draft_tokens"],
            d["num_accepted_drafts"],
            list(d["accepted_per_position"]),
        )

    def problem(self) -> str | None:
        """Why these counts are impossible, in one phrase; None when a drafter could have produced them
        (`totals_problem`, then `per_position_problem`)."""
        return self.totals_problem() or self.per_position_problem()

    def totals_problem(self) -> str | None:
        """What no drafter of depth K gives: no more accepted than drafted, and at most K accepted per cycle (a
        chain accepts a prefix of its K drafts; a tree, one path of depth K, though it may draft more tokens than K,
        so drafted tokens are not bounded by K). A server's per-request counts are checked with this before they
        become an acceptance length (50 accepted of 3 drafted read as AL 51)."""
        counts = (self.num_cycles, self.num_draft_tokens, self.num_accepted, *self.accepted_per_position)
        if any(isinstance(n, bool) or not isinstance(n, int) or n < 0 for n in counts):
            return "counts that are not whole numbers >= 0"
        if self.num_accepted > self.num_draft_tokens:
            return f"{self.num_accepted} accepted drafts of {self.num_draft_tokens} drafted"
        k = self.max_draft_len
        if self.num_accepted and (k or not self.num_cycles) and self.num_accepted > self.num_cycles * k:
            return f"{self.num_accepted} accepted drafts in {self.num_cycles} cycles of at most K = {k}"
        return None

    def per_position_problem(self) -> str | None:
        """Per-position counts that contradict the totals (none given: nothing to contradict): a position beyond K,
        more than the cycles, a later position accepted more often than an earlier one (a chain accepts a prefix), or
        a sum other than the accepted drafts."""
        per_position, k, cycles = self.accepted_per_position, self.max_draft_len, self.num_cycles
        if not any(per_position):
            return None
        if k and any(per_position[k:]):
            return f"accepted drafts at position {len(per_position) - 1} beyond K = {k}"
        if max(per_position) > cycles or any(a < b for a, b in zip(per_position, per_position[1:], strict=False)):
            return f"per-position counts {per_position} no chain of {cycles} cycles gives"
        if sum(per_position) != self.num_accepted:
            return f"per-position counts summing to {sum(per_position)}, not to the {self.num_accepted} accepted"
        return None

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


# What a run's acceptance was computed from (its "basis"): each request's own counts (our engine's counters, or the
# fields a server returns with each response), summed. `server.metrics` names the fallback.
PER_REQUEST = "per-request counts"


def merge_acceptance(per_request: list[dict[str, Any]], max_draft_len: int = 0) -> AcceptanceStats:
    """The sum of per-request acceptance dicts (`to_dict()` layout: our engine's counters or a server's per-request
    fields). K is the largest any request or the caller names: a server that reports its own K wins over the one
    the user declared."""
    k = max([max_draft_len, *(d["max_draft_len"] for d in per_request)])
    total = AcceptanceStats(k)
    for d in per_request:
        stats = AcceptanceStats.from_dict(d)
        stats.accepted_per_position += [0] * (k - len(stats.accepted_per_position))
        total.merge(stats)
    return total


def run_acceptance(per_request: list[dict[str, Any]], max_draft_len: int = 0) -> dict[str, Any]:
    """A run's acceptance from its requests' counts, `to_dict()` layout, with "basis" (what it was computed from),
    "num_requests" (those with draft cycles) and "source" (which server fields, when a server's)."""
    out = merge_acceptance(per_request, max_draft_len).to_dict()
    if not all(d.get("accepted_per_position") for d in per_request):  # SGLang's have none: zeros measure nothing
        out["per_position_rate"], out["accepted_per_position"] = [], []
        out["note"] += "; not every request reported per-position counts"
    sources = sorted({d["source"] for d in per_request if d.get("source")})
    out["basis"] = PER_REQUEST
    # the independent units the run's sampling error rests on (`acceptance_power`): requests that drafted
    out["num_requests"] = sum(1 for d in per_request if d.get("num_cycles"))
    if sources:
        out["source"] = " + ".join(sources)
    return out
