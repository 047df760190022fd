"""Drift: does acceptance fall as a run goes on? ("acceptance decays over hours under prefix caching until a
restart": a soak run's later documents draft worse than its first ones.)

Each document's acceptance length (1 + accepted drafts / draft cycles, from its recorded counts) against its
position in the run (the documents served before it). The trend test is Kendall's tau between the two, one-sided
for a decay: rank-based, so a few documents that are easy or hard to draft cannot make a trend, and exact for small
n. The size is the least-squares slope, in acceptance length per 100 documents."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ...results.acceptance_paired import doc_counts
from ...results.sample_record import SampleRecord

DECAY, NO_TREND, TOO_FEW = "DECAY", "NO-TREND", "TOO-FEW"
MIN_DOCUMENTS = 8  # fewer cannot show a trend at alpha 0.05 unless it is perfectly monotone


@dataclass(frozen=True)
class Drift:
    verdict: str  # DECAY | NO-TREND | TOO-FEW
    n: int
    tau: float | None
    p_decay: float | None  # one-sided: acceptance falls with position
    slope_per_100: float | None  # acceptance length per 100 documents (least squares)
    first_half_al: float | None
    second_half_al: float | None
    alpha: float

    def to_json(self) -> dict[str, Any]:
        return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def document_lengths(samples: Sequence[SampleRecord]) -> list[float]:
    """Per document in run order: its acceptance length (documents that drafted nothing are left out)."""
    out = []
    for s in samples:
        counts = doc_counts(s)
        if counts is not None:
            out.append(1.0 + counts[1] / counts[0])
    return out


def drift_test(lengths: Sequence[float], alpha: float = 0.05) -> Drift:
    n = len(lengths)
    if n < MIN_DOCUMENTS:
        return Drift(TOO_FEW, n, None, None, None, None, None, alpha)
    from scipy import stats

    positions = list(range(n))
    tau, p = stats.kendalltau(positions, lengths, alternative="less")
    slope = stats.linregress(positions, lengths).slope if len(set(lengths)) > 1 else 0.0
    half = n // 2
    first, second = sum(lengths[:half]) / half, sum(lengths[half:]) / (n - half)
    tau = 0.0 if tau != tau else float(tau)  # all lengths equal: no trend
    p = 1.0 if p != p else float(p)
    return Drift(DECAY if p < alpha else NO_TREND, n, tau, p, float(slope) * 100, first, second, alpha)


def render_drift(d: Drift, name: str) -> str:
    if d.verdict == TOO_FEW:
        return f"{name}: {d.verdict}: {d.n} documents drafted; a trend needs at least {MIN_DOCUMENTS}"
    return (
        f"{name}: {d.verdict}  n={d.n}  Kendall tau={d.tau:+.3f}  p(decay)={d.p_decay:.3g}  "
        f"slope={d.slope_per_100:+.3f} AL per 100 documents  AL first half {d.first_half_al:.3f}, "
        f"second half {d.second_half_al:.3f}"
    )
