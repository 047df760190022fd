"""A sequential paired A/B test on the discordant pairs: decide "B worse" or "no difference shown" as soon as
the pairs allow (a truncated SPRT, Wald 1945).

Two runs over the same documents in the same order give paired correctness (one filter, e.g.
flexible-extract). Only discordant documents carry information (McNemar): A right and B wrong ("B worse") or A
wrong and B right ("B better"). Given that a document is discordant, let p = P(B right). Hypotheses:

    H0: p = 1/2 (no difference),    H1: p = p1 < 1/2 (B worse; default p1 = 1/3: B loses twice as many
                                         discordant documents as it wins).

A drop of `drop` accuracy points with a fraction q of the documents discordant means p1 = (1 - drop/(100 q)) / 2
(`p1_from_drop`): the accuracy difference is q (2p - 1).

**Statistic.** After m discordant pairs, w of them "B worse" and m - w "B better", the log-likelihood ratio of
H1 to H0 is

    L_m = w log(2 (1 - p1)) + (m - w) log(2 p1).

**Boundaries.** "B worse" when L_m >= log(1 / alpha); "no difference shown" when L_m <= log(beta / (1 - alpha))
(Wald's lower bound, lowered only if needed so that the test without truncation has power >= 1 - 0.9 beta);
otherwise continue. Under H0 the likelihood ratio exp(L_m) is a non-negative martingale with mean 1, so by
Ville's inequality P(L_m >= log(1/alpha) for some m) <= alpha: the false "B worse" rate stays <= alpha however
many pairs arrive, however often one looks (after every pair or only after each batch), and whether or not the
lower boundary is acted on. (Wald's own upper bound log((1 - beta)/alpha) would only give alpha / (1 - beta).)

**Truncation.** `pairs_needed` is the smallest m at which the test, looking after every pair, has power
>= 1 - beta at p1, computed exactly by dynamic programming over the binomial lattice; at that many pairs the
test stops with "no difference shown". When the documents run out first, `decide(..., final=True)` says "no
difference shown", with the shortfall in its reason. Looking only after each batch keeps the false "B worse"
rate but loses a little power: feed the pairs in evaluation order to `scan` to decide at the first crossing.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.optimize import brentq
from scipy.stats import binom

from ...results.run_summary import Verdict

B_WORSE, NO_DIFFERENCE, CONTINUE = "B-WORSE", "NO-DIFFERENCE", Verdict.CONTINUE
_MAX_PAIRS = 1_000_000
_NEGLIGIBLE = 1e-9  # probability still running below which the untruncated test counts as finished


@dataclass(frozen=True)
class PairedDecision:
    verdict: str  # B-WORSE | NO-DIFFERENCE | CONTINUE
    n_pairs: int
    n_b_worse: int
    n_b_better: int
    llr: float
    reason: str
    pairs_needed: int

    @property
    def final(self) -> bool:
        return self.verdict != CONTINUE

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "n_pairs": self.n_pairs,
            "n_b_worse": self.n_b_worse,
            "n_b_better": self.n_b_better,
            "llr": self.llr,
            "reason": self.reason,
            "pairs_needed": self.pairs_needed,
        }


@dataclass(frozen=True)
class PairedOperatingPoint:
    p: float  # P(B right | discordant)
    p_worse: float
    p_no_difference: float
    expected_pairs: float
    method: str
    std_error: float | None = None


@dataclass(frozen=True)
class PairedSequentialDesign:
    alpha: float = 0.05
    beta: float = 0.2
    p1: float = 1.0 / 3.0
    max_pairs: int | None = None  # None: pairs_needed
    step_worse: float = field(init=False)  # L grows by this for a "B worse" pair
    step_better: float = field(init=False)  # ... and by this (negative) for a "B better" pair
    upper: float = field(init=False)
    lower: float = field(init=False)
    pairs_needed: int = field(init=False)

    def __post_init__(self) -> None:
        if not (0 < self.alpha < 1 and 0 < self.beta < 1):
            raise ValueError(f"alpha and beta must lie in (0, 1), got {self.alpha}, {self.beta}")
        if not 0 < self.p1 < 0.5:
            raise ValueError(f"p1 = P(B right | discordant) under 'B worse' must lie in (0, 0.5), got {self.p1}")
        if self.max_pairs is not None and self.max_pairs < 1:
            raise ValueError(f"max_pairs must be at least 1, got {self.max_pairs}")
        steps, upper, lower, needed = _calibrate(self.alpha, self.beta, self.p1)
        derived = {
            "step_worse": steps[0],
            "step_better": steps[1],
            "upper": upper,
            "lower": lower,
            "pairs_needed": needed,
        }
        for name, value in derived.items():
            object.__setattr__(self, name, value)

    @classmethod
    def p1_from_drop(cls, drop: float, discordant_fraction: float) -> float:
        """p1 for an accuracy drop of `drop` points when a fraction q of the documents is discordant."""
        if not 0 < discordant_fraction <= 1:
            raise ValueError(f"the discordant fraction must lie in (0, 1], got {discordant_fraction}")
        p1 = (1 - drop / (100 * discordant_fraction)) / 2
        if not 0 < p1 < 0.5:
            raise ValueError(f"a drop of {drop} points cannot come from {discordant_fraction:.1%} discordant documents")
        return p1

    @property
    def truncation(self) -> int:
        return self.max_pairs if self.max_pairs is not None else self.pairs_needed

    def llr(self, n_b_worse: int, n_b_better: int) -> float:
        return n_b_worse * self.step_worse + n_b_better * self.step_better

    def thresholds(self, n_pairs: int) -> tuple[int | None, int | None]:
        """At n_pairs discordant pairs: "B worse" when at most the first count favour B, "no difference shown"
        when at least the second do (None where the count cannot reach the boundary)."""
        worse, same = _crossings(n_pairs, self.step_worse, self.step_better, self.upper, self.lower)
        return (worse if worse >= 0 else None), (same if same <= n_pairs else None)

    def decide(self, n_b_worse: int, n_b_better: int, final: bool = False) -> PairedDecision:
        """The verdict after these counts; `final`: no more pairs will come (the documents ran out)."""
        if n_b_worse < 0 or n_b_better < 0:
            raise ValueError(f"pair counts cannot be negative: {n_b_worse}, {n_b_better}")
        m, llr = n_b_worse + n_b_better, self.llr(n_b_worse, n_b_better)
        counts = f"{n_b_worse} of {m} discordant pairs B worse"
        worse_max, same_min = _crossings(m, self.step_worse, self.step_better, self.upper, self.lower)
        if n_b_better <= worse_max:  # the same as llr >= upper, in the integers the exact computation uses
            verdict, why = B_WORSE, f"log-LR {llr:.2f} >= {self.upper:.2f} = log(1/alpha)"
        elif n_b_better >= same_min:
            verdict, why = NO_DIFFERENCE, f"log-LR {llr:.2f} <= {self.lower:.2f}: not worse by p1 = {self.p1:.3f}"
        elif m >= self.truncation:
            verdict, why = NO_DIFFERENCE, f"reached the design's {self.truncation} pairs without crossing"
        elif final:
            verdict = NO_DIFFERENCE
            why = (
                f"inconclusive: the documents ran out after {m} of the {self.pairs_needed} discordant pairs the "
                f"design needs for power {1 - self.beta:.2f} at p1 = {self.p1:.3f}"
            )
        else:
            verdict, why = CONTINUE, f"log-LR {llr:.2f} in ({self.lower:.2f}, {self.upper:.2f})"
        return PairedDecision(verdict, m, n_b_worse, n_b_better, llr, f"{verdict}: {counts}; {why}", self.pairs_needed)

    def scan(self, b_better: Iterable[bool], final: bool = False) -> PairedDecision:
        """Walk the discordant pairs in evaluation order (True: B right, A wrong) and stop at the first crossing."""
        worse = better = 0
        for outcome in b_better:
            better, worse = better + bool(outcome), worse + (not outcome)
            decision = self.decide(worse, better)
            if decision.final:
                return decision
        return self.decide(worse, better, final=final)

    def operating_characteristics(self, p: float) -> PairedOperatingPoint:
        """Exact P("B worse"), P("no difference") and E[pairs] when P(B right | discordant) = p, looking after
        every pair, truncated at `truncation` pairs."""
        power, _, _, _, expected = _run(p, self.step_worse, self.step_better, self.upper, self.lower, self.truncation)
        return PairedOperatingPoint(p, power, 1 - power, expected, "exact (binomial lattice)")

    def simulate(self, p: float, sims: int = 10_000, seed: int = 0, look_every: int = 1) -> PairedOperatingPoint:
        """The same by simulation, looking after every `look_every` pairs (and at the truncation)."""
        if look_every < 1:
            raise ValueError(f"look_every must be at least 1, got {look_every}")
        rng = np.random.default_rng(seed)
        m = self.truncation
        looked = np.zeros(m, dtype=bool)
        looked[look_every - 1 :: look_every] = True
        looked[-1] = True
        bounds = [_crossings(k, self.step_worse, self.step_better, self.upper, self.lower) for k in range(1, m + 1)]
        worse_max, same_min = (np.array(side) for side in zip(*bounds, strict=True))
        worse_runs, pairs = 0, 0
        chunk = max(1, 4_000_000 // m)  # bounds the memory of one block of simulated runs
        for done in range(0, sims, chunk):
            size = min(chunk, sims - done)
            better = np.cumsum(rng.random((size, m)) < p, axis=1)  # pairs favouring B after each pair
            worse = (better <= worse_max) & looked
            stop = (worse | (better >= same_min)) & looked
            stop[:, -1] = True
            first = np.argmax(stop, axis=1)
            worse_runs += int(worse[np.arange(size), first].sum())
            pairs += int(first.sum()) + size
        p_worse = worse_runs / sims
        return PairedOperatingPoint(
            p,
            p_worse,
            1 - p_worse,
            pairs / sims,
            f"simulation, {sims} runs, seed {seed}, look every {look_every}",
            math.sqrt(p_worse * (1 - p_worse) / sims),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "truncated SPRT on discordant pairs",
            "alpha": self.alpha,
            "beta": self.beta,
            "p1": self.p1,
            "upper": self.upper,
            "lower": self.lower,
            "pairs_needed": self.pairs_needed,
            "truncation": self.truncation,
        }


@functools.lru_cache(maxsize=64)
def _calibrate(alpha: float, beta: float, p1: float) -> tuple[tuple[float, float], float, float, int]:
    """Steps, upper and lower bounds and pairs_needed (see the module docstring); cached: exact runs take time."""
    steps = (math.log(2 * (1 - p1)), math.log(2 * p1))
    upper, lower = math.log(1 / alpha), math.log(beta / (1 - alpha))

    def shortfall(bound: float) -> float:  # untruncated power above the target: > 0 is good enough
        return _run(p1, *steps, upper, bound, None)[0] - (1 - 0.9 * beta)

    if shortfall(lower) < 0:
        low = lower - 1.0
        while shortfall(low) < 0:
            low -= 1.0
        # the power is a step function of the bound: step just past the jump, onto the side that reaches it
        lower = brentq(shortfall, low, lower, xtol=1e-5) - 1e-5
    needed = _run(p1, *steps, upper, lower, None, stop_at_power=1 - beta)[3]
    return steps, upper, lower, needed


def fixed_pairs_needed(alpha: float, beta: float, p1: float) -> int:
    """The smallest number of discordant pairs at which the exact one-sided binomial test at level alpha
    ("B worse" when few pairs favour B) has power >= 1 - beta at p1: the fixed-sample comparison."""
    for m in range(1, _MAX_PAIRS):
        critical = int(binom.ppf(alpha, m, 0.5))  # P(X <= critical) >= alpha; step down to <= alpha
        while critical >= 0 and binom.cdf(critical, m, 0.5) > alpha:
            critical -= 1
        if critical >= 0 and binom.cdf(critical, m, p1) >= 1 - beta:
            return m
    raise ValueError(f"no fixed test reaches power {1 - beta} at p1 = {p1}")


def _run(p, step_worse, step_better, upper, lower, max_pairs, stop_at_power=None):
    """Dynamic programming over (pairs m, pairs favouring B x) with absorbing boundaries. Returns
    (P(B worse), P(no difference at a boundary), P(still running), m reached, E[pairs]). At m pairs the test is
    still running for x strictly between the two crossing counts of `_crossings`, a band of constant width, so
    only that band is kept. With stop_at_power, runs until P(B worse) reaches it and returns that m as the 4th
    value."""
    start, prob = 0, np.ones(1)  # prob[i] = P(x = start + i and still running)
    worse = same = expected = 0.0
    m = 0
    while True:
        if stop_at_power is not None and worse >= stop_at_power:
            return worse, same, float(prob.sum()), m, expected
        if max_pairs is not None and m >= max_pairs:
            break
        if stop_at_power is None and max_pairs is None and prob.sum() < _NEGLIGIBLE:
            break
        if m >= _MAX_PAIRS or (stop_at_power is not None and prob.size == 0):
            raise ValueError(f"the design needs more than {m} discordant pairs; choose a smaller p1")
        m += 1
        grown = np.zeros(prob.size + 1)
        grown[:-1] = prob * (1 - p)
        grown[1:] += prob * p
        worse_max, same_min = _crossings(m, step_worse, step_better, upper, lower)
        cut_lo = min(max(worse_max - start + 1, 0), grown.size)  # grown[:cut_lo] crossed "B worse"
        cut_hi = max(min(same_min - start, grown.size), cut_lo)  # grown[cut_hi:] crossed "no difference"
        hit_worse, hit_same = float(grown[:cut_lo].sum()), float(grown[cut_hi:].sum())
        worse, same, expected = worse + hit_worse, same + hit_same, expected + m * (hit_worse + hit_same)
        start, prob = start + cut_lo, grown[cut_lo:cut_hi]
    running = float(prob.sum())
    return worse, same, running, m, expected + m * running


def _crossings(m: int, step_worse: float, step_better: float, upper: float, lower: float) -> tuple[int, int]:
    """At m pairs with x favouring B, L = (m - x) step_worse + x step_better falls as x grows: "B worse" for
    x <= the first value, "no difference" for x >= the second."""
    span = step_worse - step_better
    return (math.floor((m * step_worse - upper) / span + 1e-9), math.ceil((m * step_worse - lower) / span - 1e-9))
