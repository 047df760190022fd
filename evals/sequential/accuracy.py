"""Sequential verdicts for the accuracy gate: look after each batch of finished samples, stop at PASS or FAIL
as soon as the data allow, with the fixed-n gate's error rates kept.

The fixed-n gate (stats.hypothesis, TensorRT-LLM's formulas) fails a run of N samples when

    Z = (x - ref) / sqrt(2 sigma^2 / N) < z(alpha),

a two-sample statistic: the reference is treated as the mean of another N samples with the same sigma.

**Statistic.** At look k, after the first n_k samples in evaluation order (a seeded random order: `subsets`),
with x_k their mean score (0-100),

    D_k = x_k - ref,    Var(D_k) = v_k = sigma^2 / n_k + sigma^2 / n_ref,    Z_k = D_k / sqrt(v_k).

The run's share of the variance shrinks with n_k; the reference's share does not: the reference is one number,
measured once on n_ref samples (default n_ref = N, the planned count). At the last look (n_K = N = n_ref),
v_K = 2 sigma^2 / N: Z_K is exactly the fixed gate's statistic. The reference's error R is common to all looks,
so Cov(D_j, D_k) = sigma^2 / n_k + Var(R) = v_k for j < k: (Z_k) has the canonical joint distribution of group
sequential tests with information I_k = 1 / v_k (stats.group_sequential), and Z_k ~ N(delta sqrt(I_k), 1) for a
true difference delta = mean - ref.

**Boundaries.** FAIL when Z_k < a_k, PASS when Z_k >= b_k, otherwise continue; a_K = b_K, so the last look always
decides. a_k spends alpha under delta = 0 over the information fraction t_k = I_k / I_K with a
Hwang-Shih-DeCani function (default gamma = -8), ignoring the PASS side (non-binding: acting on a PASS, or
not, never raises the false-FAIL rate). b_k spends beta under delta = -theta, theta = -(z(alpha) + z(beta)) *
sqrt(sigma^2 / N + sigma^2 / n_ref) (the fixed gate's minimum detectable effect at N), given the a_k (default
gamma = -2). The boundaries come from recursive numerical integration of the group-sequential density, not from
simulation; the tests check them by simulating Bernoulli runs.

Why gamma = -8 rather than O'Brien-Fleming: the reference's fixed share makes the information fraction large
early (t = 2 n / (N + n): 0.5 of the information at a third of the samples) and makes late looks nearly
collinear with the last one, so O'Brien-Fleming-type spending would spend most of alpha before the last look
(a_K = -1.88 for GSM8K in batches of 64). gamma = -8 keeps a_K within 0.07 of z(alpha) = -1.645.

**Error rates.** With the reference taken as exact (true mean = ref, per-sample sd <= sigma; the Bernoulli score
is the worst case, a 0/50/100 two-filter mean has less variance), both are kept with room to spare: false FAIL
<= alpha, power at ref - theta >= 1 - beta. Under the two-sample model itself (the reference is a noisy mean of
n_ref samples and the per-sample sd is exactly sigma), the false-FAIL rate is still <= alpha, but the power at
ref - theta falls a few points below 1 - beta (0.77 for GSM8K in batches of 64): there the fixed gate already
sits exactly at 1 - beta, and by the Neyman-Pearson lemma no rule that may stop early on the same N samples can
match it. `python -m specdec_eval.studies.sequential_table --help` prints both.

**Floor.** When the fixed gate's threshold at N is at or below the floor (a broken model still scores it), the
gate cannot fail a model at the floor: the boundaries apply unchanged, and a PASS is reported as NO-GATE, as
HypothesisTest.verdict does.

**Several samples per document** (`--repeats R` at T > 0): the document is the unit. Looks count finished documents
(all R samples scored), x_k is the mean of per-document means (avg@R, stats.clustered), and the design above applies
with N = the planned documents and sigma unchanged. That sigma still bounds a document mean's spread: by the law of
total variance Var(m_d) = Var(p_d) + E[p_d (1 - p_d)] / R <= Var(y) of one sample (p_d the document's chance of a
right answer), so the error rates hold for N documents whatever the intra-class correlation. The price: no credit for
the variance repeats remove (known only once measured), so the last look has the power of N documents; the report
shows the fixed-n clustered test beside it. `python -m specdec_eval.studies.sequential_clustered` checks both error
rates by simulation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.special import ndtri

from ...results.run_summary import Verdict
from ...stats.group_sequential import Spending, crossing_probabilities, fail_boundaries, pass_boundaries
from ...stats.hypothesis import HypothesisTest

MAX_LOOKS = 200
PASS, FAIL, CONTINUE, NO_GATE = Verdict.PASS, Verdict.FAIL, Verdict.CONTINUE, Verdict.NO_GATE


@dataclass(frozen=True)
class Decision:
    verdict: str  # PASS | FAIL | CONTINUE | NO-GATE (a PASS where the gate cannot fail)
    n: int  # samples seen at this look
    n_max: int
    score: float
    reason: str
    boundary_fail: float | None  # FAIL when score < this (0-100 scale); None: no FAIL possible at this look
    boundary_pass: float | None  # PASS when score >= this; None: no PASS possible at this look
    z: float
    look: int  # 1-based

    @property
    def final(self) -> bool:
        return self.verdict != CONTINUE

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "n": self.n,
            "n_max": self.n_max,
            "score": self.score,
            "reason": self.reason,
            "boundary_fail": self.boundary_fail,
            "boundary_pass": self.boundary_pass,
            "z": self.z,
            "look": self.look,
        }


@dataclass(frozen=True)
class OperatingPoint:
    """What the design does when the true mean score is `mean`."""

    mean: float
    p_fail: float
    p_pass: float  # PASS or NO-GATE
    expected_n: float
    method: str
    std_error: float | None = None  # Monte-Carlo standard error of p_fail (None when computed numerically)


@dataclass(frozen=True, eq=False)  # eq would compare numpy arrays
class AccuracySequentialDesign:
    """A group-sequential accuracy gate. `looks` are the cumulative sample counts at which the caller will
    decide (the last one is n_max); see the module docstring for the statistic and the boundaries."""

    ref: float
    n_max: int
    looks: tuple[int, ...]
    alpha: float = 0.05
    beta: float = 0.2
    sigma: float = 50.0
    floor: float = 0.0
    n_ref: int | None = None  # samples behind the reference; None: n_max (the last look is the fixed gate)
    fail_spending: str = "hsd:-8"
    pass_spending: str = "hsd:-2"
    repeats: int = 1  # samples per document: a unit is then a document, its score the mean of its samples
    fixed: HypothesisTest = field(init=False, repr=False)
    theta: float = field(init=False)
    z_fail: np.ndarray = field(init=False, repr=False)
    z_pass: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        looks = tuple(int(n) for n in self.looks)
        _check_looks(looks, self.n_max)
        if self.n_ref is not None and self.n_ref < 1:
            raise ValueError(f"n_ref must be a positive sample count, got {self.n_ref}")
        if self.repeats < 1:
            raise ValueError(f"repeats must be at least 1, got {self.repeats}")
        fixed = HypothesisTest(self.ref, self.n_max, self.alpha, self.beta, self.sigma, floor=self.floor)
        info = self._info(np.asarray(looks, dtype=float))
        theta = -(ndtri(self.alpha) + ndtri(self.beta)) / math.sqrt(info[-1])
        z_fail = fail_boundaries(info, self.alpha, Spending(self.fail_spending))
        z_pass = pass_boundaries(info, z_fail, self.beta, Spending(self.pass_spending), -theta)
        for name, value in (("looks", looks), ("fixed", fixed), ("theta", float(theta))):
            object.__setattr__(self, name, value)
        object.__setattr__(self, "z_fail", z_fail)
        object.__setattr__(self, "z_pass", z_pass)

    @classmethod
    def for_batches(cls, ref: float, n_max: int, batch: int, **options: Any) -> AccuracySequentialDesign:
        """Looks after every `batch` samples and at n_max: batch, 2 batch, ..., n_max."""
        if batch < 1:
            raise ValueError(f"batch must be at least 1, got {batch}")
        return cls(ref, n_max, tuple(range(batch, n_max, batch)) + (n_max,), **options)

    @property
    def can_fail(self) -> bool:
        """False when the fixed gate's threshold at n_max is at or below the floor (then PASS reads NO-GATE)."""
        return self.fixed.can_fail

    @property
    def unit(self) -> str:
        """What a look counts: samples, or documents with several samples each."""
        return "samples" if self.repeats == 1 else "documents"

    def variance_model(self) -> str:
        """How the design treats several samples per document, in one line (what the run prints)."""
        if self.repeats == 1:
            return f"one sample per document, standard deviation {self.sigma:g} per sample"
        return (
            f"per-document means of {self.repeats} samples (avg@{self.repeats}), clustered by document: looks "
            f"count documents with all {self.repeats} samples scored; standard deviation {self.sigma:g} per "
            "document mean, the bound for one sample that no mean of a document's samples exceeds, so their "
            "correlation cannot raise the false-FAIL rate (repeats narrow the score; the boundaries take no "
            "credit for it)"
        )

    def _info(self, n: np.ndarray) -> np.ndarray:
        n_ref = self.n_ref if self.n_ref is not None else self.n_max
        return 1.0 / (self.sigma**2 / n + self.sigma**2 / n_ref)

    def boundaries(self) -> list[dict[str, Any]]:
        """One row per look, on the score scale: FAIL below `fail_below`, PASS at or above `pass_at` (None where
        that side cannot stop at this look)."""
        sd = 1.0 / np.sqrt(self._info(np.asarray(self.looks, dtype=float)))
        rows = []
        for k, n in enumerate(self.looks):
            fail, passing = (self.ref + z * sd[k] for z in (self.z_fail[k], self.z_pass[k]))
            rows.append(
                {
                    "look": k + 1,
                    "n": n,
                    "z_fail": float(self.z_fail[k]),
                    "z_pass": float(self.z_pass[k]),
                    "fail_below": _finite(fail),
                    "pass_at": _finite(passing),
                }
            )
        return rows

    def decide(self, n: int, score: float) -> Decision:
        """The verdict at the look with n samples, whose mean score (0-100) is `score`."""
        if n not in self.looks:
            shown = ", ".join(map(str, self.looks[:8])) + (", ..." if len(self.looks) > 8 else "")
            raise ValueError(f"{n} samples is not one of this design's looks ({shown}, {self.n_max})")
        if not 0.0 <= score <= 100.0:
            raise ValueError(f"score must lie in [0, 100], got {score}")
        k = self.looks.index(n)
        row = self.boundaries()[k]
        z = (score - self.ref) * math.sqrt(self._info(np.asarray([float(n)]))[0])
        at = f"at {n}/{self.n_max}" + ("" if self.repeats == 1 else f" documents (avg@{self.repeats})")
        lower, upper = _shown(row["fail_below"], "-inf"), _shown(row["pass_at"], "inf")
        if z < self.z_fail[k]:
            verdict = FAIL
            reason = f"FAIL {at}: score {score:.2f} < {lower}, the FAIL boundary of this look"
        elif z >= self.z_pass[k]:
            verdict = PASS if self.can_fail else NO_GATE
            reason = f"{verdict} {at}: score {score:.2f} >= {upper}, the PASS boundary of this look"
            if not self.can_fail:
                reason += f" ({self.fixed.floor_warning})"
        else:
            verdict = CONTINUE
            reason = f"CONTINUE {at}: score {score:.2f} lies in [{lower}, {upper})"
        if verdict != CONTINUE:
            reason += f"; fixed-n threshold at {self.n_max}: {self.fixed.threshold:.3f}"
        return Decision(verdict, n, self.n_max, score, reason, row["fail_below"], row["pass_at"], float(z), k + 1)

    def operating_characteristics(self, mean: float) -> OperatingPoint:
        """P(FAIL), P(PASS) and E[N] at true mean `mean` under the two-sample normal model (numerically)."""
        info = self._info(np.asarray(self.looks, dtype=float))
        p_fail, p_pass = crossing_probabilities(info, self.z_fail, self.z_pass, mean - self.ref)
        expected = float(np.dot(self.looks, p_fail + p_pass))
        return OperatingPoint(mean, float(p_fail.sum()), float(p_pass.sum()), expected, "normal two-sample model")

    def expected_sample_size(
        self, mean: float, sims: int = 10_000, seed: int = 0, reference_noise: bool = False
    ) -> OperatingPoint:
        """P(FAIL), P(PASS) and E[N] by simulating `sims` runs of Bernoulli samples (0 or 100) with true mean
        `mean`; the reference is exact, or with reference_noise itself the mean of n_ref Bernoulli samples."""
        if not 0.0 <= mean <= 100.0:
            raise ValueError(f"mean must lie in [0, 100], got {mean}")
        rng = np.random.default_rng(seed)
        looks = np.asarray(self.looks)
        counts = np.cumsum(rng.binomial(np.diff(looks, prepend=0), mean / 100.0, size=(sims, len(looks))), axis=1)
        ref = np.full(sims, self.ref)
        if reference_noise:
            n_ref = self.n_ref if self.n_ref is not None else self.n_max
            ref = 100.0 * rng.binomial(n_ref, self.ref / 100.0, size=sims) / n_ref
        failed, stopped_at = self.outcomes(100.0 * counts / looks, ref)
        p_fail = float(failed.mean())
        reference = "noisy" if reference_noise else "exact"
        method = f"Bernoulli simulation, {sims} runs, seed {seed}, reference {reference}"
        return OperatingPoint(
            mean, p_fail, 1.0 - p_fail, float(stopped_at.mean()), method, math.sqrt(p_fail * (1.0 - p_fail) / sims)
        )

    def outcomes(self, scores: np.ndarray, ref: np.ndarray | float) -> tuple[np.ndarray, np.ndarray]:
        """Simulated runs through every look, vectorised: `scores` (runs x looks) is each run's mean score (0-100) at
        each look, `ref` the reference each run is judged against (one per run, or one for all). Returns whether each
        run FAILed and the unit count it stopped at (the first crossing; the last look always decides)."""
        looks = np.asarray(self.looks)
        ref = np.broadcast_to(np.asarray(ref, dtype=float).reshape(-1, 1), (scores.shape[0], 1))
        z = (scores - ref) * np.sqrt(self._info(looks.astype(float)))
        fail, passed = z < self.z_fail, z >= self.z_pass
        stop = fail | passed
        stop[:, -1] = True
        first = np.argmax(stop, axis=1)
        return fail[np.arange(len(first)), first], looks[first]

    def to_dict(self) -> dict[str, Any]:
        """The design as the manifest records it."""
        return {
            "kind": "group-sequential accuracy gate",
            "ref": self.ref,
            "n_max": self.n_max,
            "looks": list(self.looks),
            "alpha": self.alpha,
            "beta": self.beta,
            "sigma": self.sigma,
            "floor": self.floor,
            "n_ref": self.n_ref if self.n_ref is not None else self.n_max,
            "theta": self.theta,
            "fail_spending": self.fail_spending,
            "pass_spending": self.pass_spending,
            "unit": self.unit,
            "repeats": self.repeats,
            "variance_model": self.variance_model(),
            "fixed_threshold": self.fixed.threshold,
            "can_fail": self.can_fail,
            "boundaries": self.boundaries(),
        }


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def _shown(x: float | None, infinite: str) -> str:
    return infinite if x is None else f"{x:.2f}"


def _check_looks(looks: tuple[int, ...], n_max: int) -> None:
    if n_max < 1:
        raise ValueError(f"n_max must be at least 1, got {n_max}")
    if not looks or looks[-1] != n_max:
        raise ValueError(f"the last look must be n_max = {n_max}, got looks {list(looks)[-3:]}")
    if looks[0] < 1 or any(b <= a for a, b in zip(looks, looks[1:], strict=False)):
        raise ValueError("looks must be strictly increasing positive sample counts")
    if len(looks) > MAX_LOOKS:
        raise ValueError(f"{len(looks)} looks is more than {MAX_LOOKS}; look after larger batches")
