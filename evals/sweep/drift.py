"""Drift: does acceptance fall as a run goes on? ("acceptance decays over hours under prefix caching until a
restart": a soak run's later documents draft worse than its first ones.)

Per task, each document's acceptance length (1 + accepted drafts / draft cycles, from its recorded counts) against
its position in time: the order in which its request was sent (ties, as our engine's batch sends them all at once,
broken by when each was answered). Per task, because tasks draft differently: a run's rows come task by task, and two
tasks of constant but different acceptance would read as a trend in row order. A run recorded before send times
were kept cannot be ordered by time, and says so.

The trend test is Kendall's tau between the two, one-sided for a decay: rank-based, so a few documents that are easy
or hard to draft cannot make a trend, and exact for small n. Each task is tested at alpha / (tasks tested)
(Bonferroni), so a run of several tasks is no likelier to read DECAY by chance than a run of one. The size is the
least-squares slope, in acceptance length per 100 documents."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ...errors import UserError
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


class UntimedRun(UserError):
    """The run's samples carry no send times (recorded before they were kept): no order in time to test."""


def document_lengths(samples: Sequence[SampleRecord]) -> list[float]:
    """Per document in the order given: its acceptance length (documents that drafted nothing are left out)."""
    out = []
    for s in samples:
        counts = doc_counts(s)
        if counts is not None:
            out.append(1.0 + counts[1] / counts[0])
    return out


def task_lengths_in_time(samples: Sequence[SampleRecord], run: str = "the run") -> dict[str, list[float]]:
    """Per task (in the run's order of tasks): its documents' acceptance lengths in the order their requests were
    sent. Raises UntimedRun when a drafted document has no send time."""
    by_task: dict[str, list[SampleRecord]] = {}
    for s in samples:
        if doc_counts(s) is None:
            continue  # drafted nothing: no acceptance length to order
        if not _is_time(s.sent_at):
            raise UntimedRun(
                f"{run}: cannot order its documents by time: its samples carry no send time (recorded before "
                "specdec-eval kept one); rerun it to test drift"
            )
        by_task.setdefault(s.task, []).append(s)
    return {
        task: document_lengths(sorted(rows, key=lambda s: (s.sent_at, _finish_or_inf(s.finished_at))))
        for task, rows in by_task.items()
    }


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


def drift_per_task(series: dict[str, list[float]], alpha: float = 0.05) -> dict[str, Drift]:
    """Each task's trend test, at alpha / (the number of tasks with enough documents to test)."""
    tested = sum(len(lengths) >= MIN_DOCUMENTS for lengths in series.values())
    level = alpha / max(1, tested)
    return {task: drift_test(lengths, level) for task, lengths in series.items()}


def render_drift(d: Drift, name: str) -> str:
    if d.verdict == TOO_FEW:
        return f"{name}: {d.verdict}: {d.n} document(s) drafted; a trend needs at least {MIN_DOCUMENTS} (not tested)"
    return (
        f"{name}: {d.verdict}  n={d.n}  Kendall tau={d.tau:+.3f}  p(decay)={d.p_decay:.3g} (alpha {d.alpha:.3g})  "
        f"slope={d.slope_per_100:+.3f} AL per 100 documents  AL first half {d.first_half_al:.3f}, "
        f"second half {d.second_half_al:.3f}"
    )


def _is_time(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _finish_or_inf(value: Any) -> float:
    return float(value) if _is_time(value) else math.inf
