"""What the acceptance-length gate can see: its power, from its own variance model, stated beside every verdict.

**Variance model.** A run's acceptance length is a ratio of sums over its requests, AL = 1 + sum(a_i) / sum(c_i) (a_i
drafts accepted, c_i draft cycles of request i). The draft cycles of one request are not independent: they share its
text, and a drafter that reads one document well reads all of its cycles well, so treating cycles as independent trials
understates the error (on the embedded default by the design effect that
`python -m specdec_eval.studies.sequential_acceptance` prints). Requests are the independent units (each a document
drawn from the task), so the error of AL is the ratio estimator's, clustered by request (delta method): SE =
sqrt(sum((a_i - r c_i)^2) / (n (n - 1))) / mean(c), r = sum(a) / sum(c). The run computes exactly this for the gate as
its sampling slack, SLACK_Z standard errors (`acceptance_slack`), so the gate recovers SE = slack / SLACK_Z and
needs no other input. The reference is taken as exact, as the gate takes it.

**The gate's rule, as a test.** With the band's floor `low` (`acceptance.acceptance_band`: the larger
of min_al - slack and ref_al (1 - max(rtol, slack / ref_al))) the gate FAILs a drop when AL < low. With AL ~
N(true AL, SE^2), SE scaled with the true AL (a drafter that lost a share d of its acceptance length on every
document spreads that much less between documents; without this the statement overstated the smallest detectable
drop at ten documents by a fifth: 0.94, not 0.8, of simulated runs caught it):

    false FAIL of an unchanged drafter (its alpha, lower side)   alpha = P(FAIL | true AL = ref_al)
    P(FAIL) when the true AL is ref_al (1 - d)                    power(d)
    smallest drop detected with probability 1 - beta              d*: power(d*) = 1 - beta

Where rtol sets the floor it is a fixed number and power(d) = Phi((low - ref_al (1 - d)) / SE). Where the slack
sets it (low = c - SLACK_Z SE-hat, c = ref_al or min_al), the rule is a t test with SE estimated from the run's own
n documents: power(d) is noncentral Student's t with n - 1 degrees of freedom (at ten documents the slack's 2.576
standard errors leave 1.5 % of an unchanged drafter below the band, not the normal's 0.5 %). A seeded simulation in
the tests checks these figures (on real runs: `python -m specdec_eval.studies.sequential_acceptance`).

**What the test id is meant to catch** is a drop to min_al (TensorRT-LLM's tripwire, 0.95 ref_al: a 5 % drop).
The band is *wider* than that regression when its floor lies below min_al, i.e. when the slack exceeds
ref_al - min_al: an AL below min_al then passes. The gate says so in its record (`band_wider_than_min_al`), and
every reader shows it beside the PASS. Even a band at min_al catches a drop to exactly min_al with probability
at most 1/2 (it sits on the band's edge): power 1 - beta at a 5 % drop is beyond this gate at any n, and the
statement says so rather than print a document count; the paired A/B (`compare`, `ab`) is the test that
reaches it (stats.acceptance_ratio).

Documents scale the error as 1 / sqrt(n) (requests are the units): at n' documents SE' = SE sqrt(n / n').
"""

from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass
from typing import Any

from scipy.special import ndtr

SLACK_Z = 2.576  # the standard errors in the run's sampling slack (`acceptance_gate.acceptance_slack`'s z)
DEFAULT_BETA = 0.2  # as the accuracy gate's (TensorRT-LLM's default)
MAX_DOCUMENTS = 10_000_000
AT_MIN_AL = 1e-4  # relative: a floor this close to min_al is at it (min_al = 0.95 ref_al is written rounded)
MODEL = "ratio estimator clustered by request (delta method); SE = sampling slack / 2.576"


@dataclass(frozen=True)
class GatePower:
    """The acceptance gate's power at this run's n (relative drops: 0.05 is 5 % below ref_al)."""

    num_documents: int | None  # requests the run's AL rests on (None: not recorded)
    std_error: float  # of AL, absolute
    alpha: float  # P(FAIL) of an unchanged drafter, lower side of the band
    beta: float
    mde: float  # the smallest relative drop detected with probability 1 - beta
    mde_al: float  # the AL that drop leaves
    min_al_drop: float  # 1 - min_al / ref_al: the regression the test id is meant to catch
    p_detect_min_al: float  # P(FAIL) when the true AL is min_al
    band_wider_than_min_al: bool  # the band's floor lies below min_al: an AL under min_al passes
    documents_for_band_at_min_al: int | None  # n at which the slack stops lowering the floor (None: never)
    documents_for_min_al_drop: int | None  # n at which a drop to min_al is detected with 1 - beta (None: never)
    limit_p_detect_min_al: float  # P(FAIL) at min_al as n grows without bound
    statement: str
    model: str = MODEL

    def to_json(self) -> dict[str, Any]:
        return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def band_floor(ref_al: float, min_al: float, rtol: float, slack: float) -> float:
    """The band's floor exactly as the gate applies it (`acceptance.acceptance_band`)."""
    return max(min_al - slack, ref_al * (1 - max(rtol, slack / ref_al)))


def gate_power(
    ref_al: float,
    min_al: float,
    rtol: float,
    slack: float,
    num_documents: int | None = None,
    beta: float = DEFAULT_BETA,
) -> GatePower | None:
    """The gate's power at this run (None when the run gave no sampling error: fewer than two requests with
    draft cycles, or no per-request counts; then nothing can be said)."""
    ref_al, min_al, rtol, slack = float(ref_al), float(min_al), float(rtol), float(slack)  # numpy in: JSON out
    if slack <= 0 or ref_al <= 0:
        return None
    se = slack / SLACK_Z
    low = band_floor(ref_al, min_al, rtol, slack)
    p_fail = functools.partial(_p_fail, ref_al, min_al, rtol, slack, num_documents)
    alpha = p_fail(ref_al)
    mde = _smallest_drop(p_fail, ref_al, 1 - beta)
    min_drop = 1 - min_al / ref_al
    p_min = p_fail(min_al)
    at = AT_MIN_AL * ref_al
    wider = low < min_al - at
    n_band = n_min = None
    if num_documents:
        n_band = _documents(num_documents, slack, lambda s, m: band_floor(ref_al, min_al, rtol, s) >= min_al - at)
        n_min = _documents(num_documents, slack, lambda s, m: _p_fail(ref_al, min_al, rtol, s, m, min_al) >= 1 - beta)
    limit_floor = band_floor(ref_al, min_al, rtol, 0.0)
    limit = 1.0 if limit_floor > min_al + at else 0.5 if abs(limit_floor - min_al) <= at else 0.0
    power = GatePower(
        num_documents, se, alpha, beta, mde, ref_al * (1 - mde), min_drop, p_min, wider, n_band, n_min, limit, ""
    )
    return GatePower(**{**asdict(power), "statement": power_statement(power)})


def _p_fail(
    ref_al: float, min_al: float, rtol: float, slack: float, num_documents: int | None, true_al: float
) -> float:
    """P(the gate FAILs low) when the true AL is `true_al`, with this run's SE taken as the true one at ref_al and
    scaled with the AL (a drafter that got worse by d accepts d less on every document: the spread between documents
    shrinks in proportion; simulated runs confirm it). Where the slack sets the floor (low = c - slack, c = ref_al or
    min_al), the rule compares (AL - c) / SE-hat with -SLACK_Z: a t statistic whose SE is estimated from the run's own n
    documents, so noncentral Student's t with n - 1 degrees of freedom (the normal when n is not recorded). Where rtol
    sets it, the floor is fixed and AL is normal."""
    se = slack / SLACK_Z * true_al / ref_al  # a drop scales every document's AL, and so the spread, with it
    fixed = ref_al * (1 - rtol)
    slack_sets_it = slack > rtol * ref_al or min_al - slack > fixed
    if not slack_sets_it:
        return float(ndtr((fixed - true_al) / se))
    c = max(min_al, ref_al) if slack > rtol * ref_al else min_al
    shift = (true_al - c) / se
    if num_documents and num_documents >= 2:
        from scipy.stats import nct

        return float(nct.cdf(-SLACK_Z, num_documents - 1, shift))
    return float(ndtr(-SLACK_Z - shift))


def _smallest_drop(p_fail, ref_al: float, power: float) -> float:
    """The relative drop d at which P(FAIL | true AL = ref_al (1 - d)) reaches `power`; the drop to AL 1 (nothing
    accepted) when not even that reaches it."""
    from scipy.optimize import brentq

    gap = lambda d: p_fail(ref_al * (1 - d)) - power  # noqa: E731
    collapse = max(1e-9, 1 - 1 / ref_al)
    if gap(0.0) >= 0:
        return 0.0
    if gap(collapse) < 0:
        return collapse
    return float(brentq(gap, 0.0, collapse, xtol=1e-7))


def _documents(n: int, slack: float, holds) -> int | None:
    """The smallest document count n' at which `holds(slack at n', n')` is true, slack scaling as sqrt(n / n');
    None when it never holds (checked at MAX_DOCUMENTS). `holds` must turn true and stay true as n' grows."""
    at = lambda m: holds(slack * math.sqrt(n / m), m)  # noqa: E731
    if not at(MAX_DOCUMENTS):
        return None
    lo, hi = 2, MAX_DOCUMENTS
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if at(mid) else (mid + 1, hi)
    return lo


def power_statement(p: GatePower) -> str:
    """One sentence a reader can act on: what drop this n sees, what a drop to min_al gets, and what would see it."""
    n = f"{p.num_documents} documents" if p.num_documents else "this run"
    text = (
        f"at {n} it detects a drop of {p.mde:.1%} (AL {p.mde_al:.3f}) with probability {1 - p.beta:.0%} "
        f"(false FAIL {p.alpha:.3f}); a drop to min_al ({p.min_al_drop:.1%}) with probability "
        f"{p.p_detect_min_al:.2f}"
    )
    if p.documents_for_min_al_drop is not None:
        return text + f"; {1 - p.beta:.0%} needs {p.documents_for_min_al_drop} documents"
    ceiling = f"at most {p.limit_p_detect_min_al:.2f} at any n"
    if p.band_wider_than_min_al and p.documents_for_band_at_min_al is not None:
        ceiling = (
            f"the band reaches min_al from {p.documents_for_band_at_min_al} documents on, and even then "
            f"catches it with probability at most {p.limit_p_detect_min_al:.2f}"
        )
    return (
        text + f"; {1 - p.beta:.0%} at that drop is beyond this gate ({ceiling}): the paired A/B (compare, ab) sees it"
    )


def underpowered_note(ref_al: float, min_al: float, low: float) -> str:
    """What a PASS within a band wider than min_al means, for the gate's reason."""
    return (
        f"the band's floor {low:.3f} lies below min_al {min_al:.3f} (ref_al {ref_al:.3f}): an AL down to "
        f"{low:.3f} passes, so this PASS does not rule out the regression this test id exists for"
    )
