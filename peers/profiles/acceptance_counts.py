"""What every per-response acceptance reader shares: reading a count from a response, and refusing counts no
drafter can produce (`ImpossibleAcceptance`: the endpoint records that request as failed with the reason, so they
never become an acceptance length, a gate's evidence or a populated reference)."""

from __future__ import annotations

from typing import Any

from ...workers.spec.metrics import AcceptanceStats


class ImpossibleAcceptance(ValueError):
    """A response's acceptance counts that no speculative decoder could have produced; the message says which."""


def count(value: Any) -> int | None:
    """A non-negative integer count, or None (a bool, a float, a string or a negative number is no count)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def possible(stats: AcceptanceStats, source: str) -> AcceptanceStats:
    """`stats` when some drafter could have produced them (`AcceptanceStats.totals_problem`); else raises."""
    problem = stats.totals_problem()
    if problem is not None:
        raise ImpossibleAcceptance(f"impossible acceptance counts in the answer ({source}): {problem}")
    return stats
