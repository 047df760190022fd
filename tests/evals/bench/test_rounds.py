"""Round interleaving, medians, spreads and the UNSTABLE word, on fake timed sides (no model)."""

from __future__ import annotations

import math

import pytest
from specdec_eval.evals.bench.rounds import (
    UNSTABLE_SPREAD,
    interleave,
    ratio_spread,
    spread_of,
    unstable_line,
)


class FakeMachine:
    """Sides whose time is their work times the machine's load in that slot: load that changes between slots is
    what a shared machine does to a benchmark. Records the order the sides ran in."""

    def __init__(self, loads: list[float]) -> None:
        self.loads, self.slot, self.order = loads, 0, []

    def side(self, name: str, work: float):
        def run(round_index: int) -> float:
            self.order.append((round_index, name))
            seconds = work * self.loads[self.slot]
            self.slot += 1
            return seconds

        return run


def test_sides_run_interleaved_round_after_round():
    m = FakeMachine([1.0] * 9)
    seen = []
    results = interleave(
        {"a": m.side("a", 1), "b": m.side("b", 2), "c": m.side("c", 3)},
        3,
        before=lambda r, name: seen.append((r, name)),
    )
    expected = [(r, n) for r in range(3) for n in "abc"]
    assert m.order == expected and seen == expected
    assert results == {"a": [1.0] * 3, "b": [2.0] * 3, "c": [3.0] * 3}


def test_interleaving_keeps_the_ratio_when_the_load_moves():
    """The load doubles after the first three slots; run one side after the other, A's rounds would all be fast
    and B's all slow (a 2x error); interleaved, every round's ratio is B/A = 2 except the one that straddles."""
    loads = [1, 1, 1, 2, 2, 2]
    m = FakeMachine(loads)
    results = interleave({"a": m.side("a", 1.0), "b": m.side("b", 2.0)}, 3)
    s = ratio_spread(results["b"], results["a"])
    assert s.median == pytest.approx(2.0)
    sequential = [1.0 * x for x in loads[:3]], [2.0 * x for x in loads[3:]]
    assert ratio_spread(sequential[1], sequential[0]).median == pytest.approx(4.0)  # what rounds protect against


def test_median_and_spread_of_per_round_ratios():
    s = ratio_spread([10.0, 12.0, 30.0], [5.0, 5.0, 10.0])  # ratios 2.0, 2.4, 3.0
    assert s.per_round == pytest.approx((2.0, 2.4, 3.0))
    assert (s.median, s.low, s.high) == pytest.approx((2.4, 2.0, 3.0))
    assert s.factor == pytest.approx(1.5) and not s.stable
    assert s.to_dict() == {"median": 2.4, "low": 2.0, "high": 3.0, "per_round": [2.0, 2.4, 3.0], "stable": False}
    assert s.describe() == "2.40x (2.00-3.00 over 3 rounds)"
    even = spread_of([1.0, 2.0, 3.0, 4.0])
    assert even.median == 2.5


def test_unstable_only_past_the_threshold():
    calm = spread_of([1.0, 1.1, UNSTABLE_SPREAD * 1.0])
    assert calm.stable and unstable_line("batch 1 ours_vs_hf", calm) is None
    wide = spread_of([0.59, 3.0, 3.57])
    line = unstable_line("batch 32 ours_vs_hf_decode", wide)
    assert line.startswith("UNSTABLE: batch 32 ours_vs_hf_decode ranged 0.59x-3.57x over 3 rounds")
    assert "max/min 6.05 > 1.3" in line


def test_a_ratio_with_a_zero_denominator_is_not_defined():
    assert ratio_spread([1.0, 2.0], [1.0, 0.0]) is None
    assert spread_of([0.0, 1.0]).factor == math.inf and not spread_of([0.0, 1.0]).stable


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="at least 2"):
        interleave({"a": lambda r: r}, 1)
    with pytest.raises(ValueError, match="numerators"):
        ratio_spread([1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="at least one"):
        spread_of([])
