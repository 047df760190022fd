"""The sequential acceptance A/B (`ab --early-stop`): stop as soon as a drop of B's acceptance length is shown, or a
drop of `drop` (5 %) is ruled out, with both error rates kept.

**Statistic.** At look k, over the first n_k documents of the seeded order that both sides finished, the relative
change R_k = AL_B / AL_A - 1 of the cycle-weighted ALs and its standard error SE_k with documents as clusters
(stats.acceptance_ratio: the same estimate `compare` tests at a fixed n). With several samples per document
(`--repeats`), a document's cycles and accepted drafts are the sums over its samples: the samples of
one document are not independent, the documents are, so the document stays the unit. Two statistics:

    T_k  = R_k / SE_k                  small when B's AL is lower          (H0: R = 0)
    T'_k = (R_k + drop) / SE_k         large when the drop is below `drop`  (H0': R = -drop)

**Two one-sided group-sequential tests.** DROP when T_k < a_k, NO-DROP when T'_k > c_k, otherwise continue.
a_k spends alpha under R = 0, c_k = -(the same boundaries for beta) spends beta under R = -drop, both over the
information fraction t_k = n_k / n_max (documents are the units, so information grows with them) with a
Hwang-Shih-DeCani function (stats.group_sequential; gamma -4: close to O'Brien-Fleming, so early looks ask
for strong evidence and the last look is near the fixed test). Each boundary is computed under its own null with
no regard for the other, so each stands alone: P(DROP | no change) <= alpha and P(NO-DROP | a drop of `drop`) <=
beta whether or not the other boundary is acted on. The boundaries are on the normal scale; SE_k is estimated, so
each is moved to Student's t with n_k - 1 degrees of freedom at the same tail probability (a look at 32 documents
would otherwise be too eager). A look where both cross reports DROP (a drop smaller than `drop` was shown).

**The last look** (n_max, or the documents both sides finished when they end) may cross neither: INCONCLUSIVE, with
what that n could detect and how many documents a drop of `drop` needs at the spread seen. Power at `drop` is
1 - beta only where n_max documents hold that much information; the design states the documents it needs.

**Error rates** are checked by simulation (`simulate`; the tests on documents like the embedded default's, and
`python -m specdec_eval.studies.sequential_acceptance` from real runs). With looks of 32 documents (ab's default
batch) both are kept. Below that the t is not to be trusted for showing a drop: on the embedded default's real documents
a single look at ten showed one in 8.8 % of A/Bs with none (the per-document changes are skewed and heavy-tailed). So a
look of fewer than SMALL_LOOK documents shows a drop by the swap test (stats.acceptance_ratio: each document's two sides
exchanged, exact under no change) at the boundary's own tail probability, Phi(a_k): 3.5 % there. Ruling a drop out stays
with the t at every look.

**Identical engines** (the same commit, greedy, float32) give identical counts on every document: R = 0 with
SE = 0, so T' is +infinity and the first look says NO-DROP.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.special import ndtr
from scipy.stats import t as student

from ...stats.acceptance_ratio import (
    DEFAULT_ALPHA,
    DEFAULT_BETA,
    DEFAULT_DROP,
    DROP,
    INCONCLUSIVE,
    NO_DROP,
    Counts,
    detectable_drop,
    documents_for_drop,
    paired_acceptance,
    ratio_change,
    swap_p_values,
)
from ...stats.group_sequential import Spending, fail_boundaries

CONTINUE = "CONTINUE"
MAX_LOOKS = 200
SMALL_LOOK = 32  # looks of fewer documents show a drop by the swap test (the t's error rate is not kept there)
SPENDING = "hsd:-4"


@dataclass(frozen=True)
class AcceptanceDecision:
    verdict: str  # DROP | NO-DROP | CONTINUE | INCONCLUSIVE
    n: int  # paired documents at this look
    n_max: int
    look: int  # 1-based; 0 before the first look
    relative: float | None
    std_error: float | None
    reason: str

    @property
    def final(self) -> bool:
        return self.verdict != CONTINUE

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "n": self.n,
            "n_max": self.n_max,
            "look": self.look,
            "relative": self.relative,
            "std_error": self.std_error,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class AcceptanceOperatingPoint:
    """What the design does over simulated A/Bs (see `simulate`)."""

    p_drop: float
    p_no_drop: float
    p_inconclusive: float
    expected_n: float
    sims: int
    method: str

    @property
    def std_error(self) -> float:
        return math.sqrt(max(self.p_drop * (1 - self.p_drop), 1e-12) / self.sims)


@dataclass(frozen=True, eq=False)  # eq would compare numpy arrays
class AcceptanceSequentialDesign:
    """Looks at `looks` paired documents (the last is n_max); see the module docstring."""

    n_max: int
    looks: tuple[int, ...]
    drop: float = DEFAULT_DROP
    alpha: float = DEFAULT_ALPHA
    beta: float = DEFAULT_BETA
    spending: str = SPENDING
    z_drop: np.ndarray = field(init=False, repr=False)  # DROP when T < its t-scale equivalent
    z_ruled_out: np.ndarray = field(init=False, repr=False)  # NO-DROP when T' > its t-scale equivalent

    def __post_init__(self) -> None:
        looks = tuple(int(n) for n in self.looks)
        if self.n_max < 2 or not looks or looks[-1] != self.n_max:
            raise ValueError(f"the last look must be n_max = {self.n_max} (>= 2), got looks {list(looks)[-3:]}")
        if looks[0] < 2 or any(b <= a for a, b in zip(looks, looks[1:], strict=False)):
            raise ValueError("looks must be strictly increasing document counts of at least 2")
        if len(looks) > MAX_LOOKS:
            raise ValueError(f"{len(looks)} looks is more than {MAX_LOOKS}; look after larger batches")
        if not (0 < self.alpha < 1 and 0 < self.beta < 1 and 0 < self.drop < 1):
            raise ValueError(f"alpha, beta and drop must lie in (0, 1), got {self.alpha}, {self.beta}, {self.drop}")
        info = np.asarray(looks, dtype=float)
        spending = Spending(self.spending)
        object.__setattr__(self, "looks", looks)
        object.__setattr__(self, "z_drop", fail_boundaries(info, self.alpha, spending))
        object.__setattr__(self, "z_ruled_out", -fail_boundaries(info, self.beta, spending))

    @classmethod
    def for_batches(cls, n_max: int, batch: int, **options: Any) -> AcceptanceSequentialDesign:
        """Looks after every `batch` documents (the first at no fewer than 2) and at n_max."""
        if batch < 1:
            raise ValueError(f"batch must be at least 1, got {batch}")
        first = max(batch, 2)
        return cls(n_max, tuple(range(first, n_max, batch)) + (n_max,), **options)

    def bounds(self, k: int) -> tuple[float, float]:
        """(DROP when T < this, NO-DROP when T' > this) at look k (0-based), on Student's t scale."""
        df = self.looks[k] - 1
        return _on_t(self.z_drop[k], df), _on_t(self.z_ruled_out[k], df)

    def decide_at(
        self, k: int, relative: float, std_error: float, final: bool = False, p_swap: float | None = None
    ) -> AcceptanceDecision:
        """The verdict at look k (0-based) from the estimate over its n_k documents; `final`: no look comes after
        this one (the last look, or the documents ran out). `p_swap`: the swap test's p-value for a drop at this
        look (a look of fewer than SMALL_LOOK documents: see the module docstring)."""
        n = self.looks[k]
        low, high = self.bounds(k)
        stat, stat_ruled = _ratios(relative, std_error, self.drop)
        at = f"look {k + 1} at {n} of {self.n_max} documents: AL {relative:+.2%} (SE {std_error:.2%})"
        level = float(ndtr(self.z_drop[k]))  # the boundary's one-sided tail: this look's share of alpha, nominally
        if p_swap is not None and p_swap < level:
            verdict, why = DROP, f"swap test p {p_swap:.3g} < {level:.3g}: B's acceptance length is lower"
            if stat_ruled > high:
                why += f" (by less than {self.drop:.0%}: that drop is ruled out too)"
        elif p_swap is None and stat < low:
            verdict, why = DROP, f"T {_shown(stat)} < {low:.2f}: B's acceptance length is lower"
            if stat_ruled > high:
                why += f" (by less than {self.drop:.0%}: that drop is ruled out too)"
        elif stat_ruled > high:
            verdict, why = NO_DROP, f"T' {_shown(stat_ruled)} > {high:.2f}: a {self.drop:.0%} drop is ruled out"
        elif final or k == len(self.looks) - 1:
            verdict = INCONCLUSIVE
            why = (
                f"neither a drop shown (T {_shown(stat)} >= {low:.2f}) nor a {self.drop:.0%} drop ruled out "
                f"(T' {_shown(stat_ruled)} <= {high:.2f}); {self.documents_note(std_error, n)}"
            )
        else:
            verdict, why = CONTINUE, f"T {_shown(stat)} >= {low:.2f} and T' {_shown(stat_ruled)} <= {high:.2f}"
        return AcceptanceDecision(verdict, n, self.n_max, k + 1, relative, std_error, f"{verdict} at {at}: {why}")

    def documents_note(self, std_error: float, n: int) -> str:
        """What a fixed test at this spread would need for the drop, from the per-document sd SE sqrt(n)."""
        detectable = detectable_drop(n, std_error, self.alpha, self.beta)
        needed = documents_for_drop(std_error * math.sqrt(n), self.drop, self.alpha, self.beta)
        return (
            f"a fixed test at {n} documents detects {detectable:.1%}; a {self.drop:.0%} drop needs about "
            f"{needed} documents at this spread"
        )

    def scan(self, pairs: Sequence[tuple[Counts, Counts]], final: bool = False) -> AcceptanceDecision:
        """Every look the documents so far reach (pairs in evaluation order), stopping at the first decision. With
        `final` (both sides ended), the documents there are judged as the last look if no planned look decided."""
        waiting = f"{CONTINUE}: {len(pairs)} paired documents, first look at {self.looks[0]}"
        decision = AcceptanceDecision(CONTINUE, len(pairs), self.n_max, 0, None, None, waiting)
        for k, n in enumerate(self.looks):
            if n > len(pairs):
                break
            e = paired_acceptance(pairs[:n])
            if e is None:
                continue
            p_swap = swap_p_values(pairs[:n])[0] if n < SMALL_LOOK else None
            decision = self.decide_at(k, e.relative, e.std_error, p_swap=p_swap)
            if decision.final:
                return decision
        if final and len(pairs) >= 2:
            return self._ran_out(pairs, decision)
        return decision

    def _ran_out(self, pairs: Sequence[tuple[Counts, Counts]], last: AcceptanceDecision) -> AcceptanceDecision:
        """The sides ended before n_max: judged at the last look they reached (its boundaries), else inconclusive."""
        e = paired_acceptance(pairs)
        if e is None:
            return AcceptanceDecision(
                INCONCLUSIVE,
                len(pairs),
                self.n_max,
                last.look,
                None,
                None,
                f"{INCONCLUSIVE}: no document drafted on both sides",
            )
        reason = (
            f"{INCONCLUSIVE}: the documents ran out at {len(pairs)} of {self.n_max} (AL {e.relative:+.2%}, "
            f"SE {e.std_error:.2%}) before a drop was shown or a {self.drop:.0%} drop ruled out; "
            f"{self.documents_note(e.std_error, e.n)}"
        )
        return AcceptanceDecision(INCONCLUSIVE, len(pairs), self.n_max, last.look, e.relative, e.std_error, reason)

    def to_dict(self) -> dict[str, Any]:
        rows = []
        for k, n in enumerate(self.looks):
            low, high = self.bounds(k)
            rows.append({"look": k + 1, "n": n, "t_drop": low, "t_ruled_out": high})
        return {
            "kind": "two one-sided group-sequential tests on the paired AL ratio",
            "n_max": self.n_max,
            "drop": self.drop,
            "alpha": self.alpha,
            "beta": self.beta,
            "spending": self.spending,
            "looks": list(self.looks),
            "boundaries": rows,
        }


def simulate(
    design: AcceptanceSequentialDesign,
    draw: Callable[[np.random.Generator, int], np.ndarray],
    sims: int = 1000,
    seed: int = 0,
    method: str = "",
) -> AcceptanceOperatingPoint:
    """P(DROP), P(NO-DROP), P(INCONCLUSIVE) and E[documents] over `sims` simulated A/Bs. draw(rng, n): an (n, 4)
    array of (cycles A, accepted A, cycles B, accepted B), one row per document in evaluation order."""
    rng = np.random.default_rng(seed)
    outcomes = {DROP: 0, NO_DROP: 0, INCONCLUSIVE: 0}
    documents = 0
    for _ in range(sims):
        counts = draw(rng, design.n_max)
        for k, n in enumerate(design.looks):
            _, _, relative, se = ratio_change(*counts[:n].T)
            p_swap = None
            if n < SMALL_LOOK:
                p_swap = swap_p_values([((r[0], r[1]), (r[2], r[3])) for r in counts[:n]], seed=seed)[0]
            decision = design.decide_at(k, relative, se, p_swap=p_swap)
            if decision.final:
                break
        outcomes[decision.verdict] += 1
        documents += decision.n
    shares = [outcomes[v] / sims for v in (DROP, NO_DROP, INCONCLUSIVE)]
    return AcceptanceOperatingPoint(*shares, documents / sims, sims, method or f"{sims} simulated A/Bs, seed {seed}")


def _on_t(z: float, df: int) -> float:
    """The t quantile with the normal tail probability of z (infinite boundaries stay infinite)."""
    if not math.isfinite(z):
        return z
    return float(student.ppf(float(ndtr(z)), df))


def _ratios(relative: float, std_error: float, drop: float) -> tuple[float, float]:
    """(T, T'); with no spread at all (identical counts moved in proportion, or not at all) the signs decide."""
    if std_error > 0:
        return relative / std_error, (relative + drop) / std_error
    sign = lambda x: math.copysign(math.inf, x) if x else 0.0  # noqa: E731
    return sign(relative), sign(relative + drop)


def _shown(x: float) -> str:
    """A statistic for a line: two decimals; huge ones (identical sides: an SE of rounding noise) in short form."""
    if not math.isfinite(x):
        return "-inf" if x < 0 else "inf"
    return f"{x:.2f}" if abs(x) < 1e6 else f"{x:.2g}"
