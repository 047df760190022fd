"""The accuracy gate: a task's verdict from the hypothesis test of its score against the reference (a GateResult
like every other gate's), with n the effective sample count when several samples per document are clustered
(n_eff = N D / deff: D when a question's samples always agree, N D when they are as independent as different
questions; the reference is taken as measured with the same precision as the run, as in TensorRT-LLM's formula).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...gates.accuracy import GATE as ACCURACY
from ...results.run_summary import GateResult, Verdict
from ...stats.clustered import ClusteredScore
from ...stats.hypothesis import HypothesisTest
from .gate import Gate, GateOutcome, RunEvidence
from .resolved_run import ResolvedRun

if TYPE_CHECKING:
    from .references import Reference


def clustered_hypothesis_test(reference: Reference, score: ClusteredScore, floor: float = 0.0) -> HypothesisTest:
    """The accuracy test of a run whose samples are clustered by document (an entry's own num_samples still wins)."""
    return reference.hypothesis_test(score.n_effective, floor)  # type: ignore[arg-type]  # a float count is fine


def clustered_note(score: ClusteredScore) -> str:
    """What the gate's report adds under a clustered run: where its n came from."""
    return (
        f"n = {score.n_effective:.1f} effective samples: {score.n_docs} documents x {score.repeats:g} samples, "
        f"clustered by document (design effect {score.design_effect:.2f}; standard error "
        f"{score.se if score.se is not None else float('nan'):.2f} from the per-document means)"
    )


def accuracy_gate(
    task: str,
    score: float,
    num_samples: int,
    reference,
    floor: float = 0.0,
    failed_requests: int = 0,
    sequential: dict | None = None,
    notes: tuple[str, ...] = (),
    clustered=None,
    conditions=None,
) -> GateResult:
    """A task's accuracy verdict, as every gate gives its own: the hypothesis test of `score` against the task's
    reference (REPORT without one), FAIL when a request failed (never scored as a wrong answer,
    never passing silently), else the sequential design's decision where --early-stop made one (its error rates are
    the ones kept). The reason is the test's report, then each note (a subset compared with a full-set reference,
    where the run stopped). Numbers: threshold and theta.
    clustered: several samples per document (a ClusteredScore): the test's n is its effective sample count.
    conditions: the run's conditions against the reference entry's (a ConditionCheck): a PASS or FAIL becomes
    NO-GATE while they differ unaccepted."""
    if reference is None:
        verdict, report, numbers = Verdict.REPORT, f"{task}: no reference (score only)", {}
    else:
        if clustered is not None:
            test = clustered_hypothesis_test(reference, clustered, floor)
            notes = (clustered_note(clustered), *notes)
        else:
            test = reference.hypothesis_test(num_samples, floor=floor)
        verdict, report = Verdict(test.verdict(score)), test.report(score)
        numbers = {"threshold": test.threshold, "theta": test.theta}
        if conditions is not None:
            judged, verdict = verdict, Verdict(conditions.verdict(verdict))
            if verdict != judged:  # the report's verdict line is the gate's, the test's own beside it
                report = report.replace(f"Verdict: {judged}", f"Verdict: {verdict} (the test alone: {judged})", 1)
            notes = (*conditions.lines(), *notes)
    if failed_requests:
        verdict = Verdict.FAIL
        failed = f"{failed_requests} of {num_samples} requests FAILED (finish reason error)"
        report += f"\n{failed}: the run fails whatever its accuracy"
    elif sequential is not None and sequential["verdict"] != Verdict.CONTINUE:
        # the conditions rule holds for the sequential verdict too: no FAIL against another experiment's number
        verdict = sequential["verdict"] if conditions is None else Verdict(conditions.verdict(sequential["verdict"]))
        report += f"\nsequential verdict at n={sequential['n']}: {sequential['verdict']} ({sequential['reason']})"
        if verdict != sequential["verdict"]:
            report += f"; the gate says {verdict}: the conditions differ from the reference's"
    report += "".join(f"\n{note}" for note in notes)
    return GateResult(verdict, report, numbers)


class AccuracyGate(Gate):
    """Each task's accuracy test, judged while the run evaluated (a sequential design's decision can stop it early),
    recorded as the task entry's own verdict, report, threshold and theta."""

    declaration = ACCURACY

    def judge(self, evidence: RunEvidence, run: ResolvedRun) -> GateOutcome:
        return GateOutcome({r.task: _recorded(r.accuracy) for r in evidence.results})


def _recorded(accuracy: GateResult) -> GateResult:
    numbers = {k: _rounded(accuracy.numbers.get(k)) for k in ("threshold", "theta")}
    return GateResult(accuracy.verdict, accuracy.reason, numbers)


def _rounded(x: float | None) -> float | None:
    return round(x, 4) if x is not None else None


GATE = AccuracyGate()
