"""Measurements that survive a shared machine: the sides of a comparison interleaved in rounds (A B C A B C ...),
each ratio the median of its per-round ratios, with the spread, and a plain word when the spread is too wide.

Why rounds: on a machine shared with other work, load comes and goes over minutes. Measured one after another,
side A may get a quiet minute and side B a busy one, and the ratio then says more about the neighbours than about
the sides (the same `bench` that printed 3.57x decode at batch 32 printed 0.59x on a loaded hour). Side by side in
each round, both sides see about the same load, so each round's ratio is fair even when the rates are not; the
median over rounds drops one bad round, and the spread over rounds says how far to trust the median.

Pure Python, no torch: the sides are callables, tested with fake timings.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")

# A ratio whose per-round values differ by more than this factor (max / min) is reported UNSTABLE: on an idle
# machine the rounds of one bench agree within a few percent; 30% apart means the load moved under the rounds.
UNSTABLE_SPREAD = 1.3
MIN_ROUNDS = 2  # a spread needs two rounds at least


def interleave(
    sides: Mapping[str, Callable[[int], T]], rounds: int, before: Callable[[int, str], None] | None = None
) -> dict[str, list[T]]:
    """Run every side once per round, in the given order, round after round (A B C A B C ...); returns each side's
    results in round order. `sides[name](round_index)` does one measurement; `before(round, name)` is told first
    (for a progress line)."""
    if rounds < MIN_ROUNDS:
        raise ValueError(f"rounds must be at least {MIN_ROUNDS}, got {rounds}")
    results: dict[str, list[T]] = {name: [] for name in sides}
    for r in range(rounds):
        for name, side in sides.items():
            if before is not None:
                before(r, name)
            results[name].append(side(r))
    return results


@dataclass(frozen=True)
class Spread:
    """A quantity measured once per round: its median, lowest and highest value, and every round's value."""

    per_round: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.per_round)

    @property
    def low(self) -> float:
        return min(self.per_round)

    @property
    def high(self) -> float:
        return max(self.per_round)

    @property
    def factor(self) -> float:
        """max / min of the rounds (1.0: every round agreed); inf when a round was zero."""
        return self.high / self.low if self.low > 0 else math.inf

    @property
    def stable(self) -> bool:
        return self.factor <= UNSTABLE_SPREAD

    def to_dict(self, digits: int = 3) -> dict[str, Any]:
        return {
            "median": round(self.median, digits),
            "low": round(self.low, digits),
            "high": round(self.high, digits),
            "per_round": [round(v, digits) for v in self.per_round],
            "stable": self.stable,
        }

    def describe(self, unit: str = "x", digits: int = 2) -> str:
        """e.g. '2.63x (2.51-2.70 over 3 rounds)'."""
        n = len(self.per_round)
        return f"{self.median:.{digits}f}{unit} ({self.low:.{digits}f}-{self.high:.{digits}f} over {n} rounds)"


def spread_of(values: Sequence[float]) -> Spread:
    if not values:
        raise ValueError("a spread needs at least one round")
    return Spread(tuple(float(v) for v in values))


def ratio_spread(numerators: Sequence[float], denominators: Sequence[float]) -> Spread | None:
    """The per-round ratios numerator[r] / denominator[r] (same round: same load); None when a denominator is not
    positive (a side that measured nothing, e.g. no decode tokens), since no ratio is defined then."""
    if len(numerators) != len(denominators):
        raise ValueError(f"{len(numerators)} numerators but {len(denominators)} denominators")
    if not numerators or any(d <= 0 for d in denominators):
        return None
    return spread_of([n / d for n, d in zip(numerators, denominators, strict=True)])


def unstable_line(name: str, spread: Spread, unit: str = "x") -> str | None:
    """The warning to print for a ratio whose rounds disagree too much; None when it can be trusted."""
    if spread.stable:
        return None
    return (
        f"UNSTABLE: {name} ranged {spread.low:.2f}{unit}-{spread.high:.2f}{unit} over {len(spread.per_round)} "
        f"rounds (max/min {spread.factor:.2f} > {UNSTABLE_SPREAD}): the machine's load changed under the "
        f"measurement; rerun with more --rounds or on a quieter machine"
    )
