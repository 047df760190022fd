"""The lossless gate of a spec-dec run: every sample against its non-speculative baseline, task by task.

THE RULE TODAY. A greedy spec-dec run must emit its baseline's tokens exactly (`check`). In float32 any divergence
FAILs. In other dtypes two plain runs already differ by rounding, so each divergence is judged by the baseline's
logit margin at its first divergent token against the noise measured on a control, the plain side decoded again at
another batch shape (`margins`, `control`): FAIL beyond 2 x the largest noise or at a divergence rate above the
control's; without a control (or logprobs) the gate cannot judge and says NO-GATE ("UNCALIBRATED: ..."), never PASS.
A calibrated `lossless_tolerance` in a reference entry still caps the divergent fraction. A paired run's twins count
as a baseline only as far as their audit on a plain engine shows (`twin_audit`); each verdict names the baseline it
rests on (`baseline`).

KINDS OF JUDGE. `JUDGES` maps a `JudgeKind` to the function that judges one task; `judge_kind` picks it. Token
identity serves greedy tasks. A sampled task of a run whose sampler does not reproduce the plain run's tokens
(`--spec-sampling rejection`, any server) is judged in distribution: the plain engine scores the run's outputs by
teacher forcing, no decoded baseline needed. A sampled task of our coupled sampler, which does reproduce them, is
judged both ways: token identity with its baseline (a key shift shows only there) and in distribution against an
independent plain engine's scoring, which gives the verdict its baseline when the paired twins cannot be audited at
temperature > 0 (their per-request seeds live in the run's engine only).

Token identity runs as steps over a frozen `IdentityVerdict` (`identity_judge`), each returning a new one; the
task's GateResult is built last, from the final verdict.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from ...results.run_summary import GateResult, Verdict
from ...results.sample_record import SampleRecord
from ...workers.interface import EngineIdentity
from ..run_types import TaskResult
from .baseline import BaselineKind, ResolvedBaseline, baseline_label
from .check import lossless_check, set_apart_failed
from .identity_judge import apply_audit, audit_brief, judge_by_margins, uncalibrated_is_no_gate
from .margins import floor_missing, noise_floor
from .scoring import judge_scored, judged_in_distribution, sampling_of


class JudgeKind(Enum):
    """How one task's losslessness is judged (see the module docstring)."""

    TOKEN_IDENTITY = "token identity"
    IN_DISTRIBUTION = "in distribution"
    IDENTITY_AND_DISTRIBUTION = "token identity and in distribution"


@dataclass(frozen=True)
class LosslessCase:
    """What one task's lossless verdict rests on."""

    task: str
    samples: list[SampleRecord]  # the spec-dec run's samples (every task's)
    baseline: ResolvedBaseline
    dtype: str  # what ran: float32 and float64 are exact
    tolerance: float | None = None  # the task's calibrated lossless_tolerance, if its reference entry has one
    in_distribution: bool = False  # the run's sampler does not reproduce a plain run's tokens


Judge = Callable[[LosslessCase], GateResult]


def evaluate_lossless(
    tasks: Iterable[str],
    samples: list[SampleRecord],
    identity: EngineIdentity,
    results: list[TaskResult],
    baseline: ResolvedBaseline,
) -> tuple[dict[str, GateResult], dict[str, Any] | None]:
    """Compare every spec-dec sample with the baseline: each task's GateResult, and the baseline's record (None
    when no baseline was found: every task is NO-BASELINE)."""
    dtype = identity.resolved_dtype or identity.dtype
    in_distribution = judged_in_distribution(identity)
    if baseline.run_id is None:
        scored = {t for t in tasks if in_distribution and _sampled_task(t, samples)}
        gates = {task: GateResult(Verdict.NO_BASELINE, baseline.missing) for task in tasks if task not in scored}
        for task in sorted(scored):  # a sampled verdict needs no decoded baseline: the plain engine scores
            gates[task] = judge_in_distribution(LosslessCase(task, samples, baseline, dtype, None, True))
        scored_label = baseline_label(BaselineKind.SCORED, None)
        record = {"run": None, "kind": BaselineKind.SCORED.value, "label": scored_label} if scored else None
        return gates, record
    tolerances = {r.task: (r.reference.entry.get("lossless_tolerance") if r.reference else None) for r in results}
    gates = {}
    for task in sorted({s.task for s in samples}):
        case = LosslessCase(task, samples, baseline, dtype, tolerances.get(task), in_distribution)
        gates[task] = JUDGES[judge_kind(case)](case)
    record = {
        "run": baseline.run_id,
        "kind": baseline.kind.value,
        "label": baseline.label,
        **({"audit": baseline.audit} if baseline.audit is not None else {}),
    }
    return gates, record


def _sampled_task(task: str, samples: list[SampleRecord]) -> bool:
    """Whether the task's outputs were sampled (temperature > 0), as its records say."""
    return any(s.task == task and sampling_of(s) is not None for s in samples)


def judge_kind(case: LosslessCase) -> JudgeKind:
    """Which judge decides a task (see the module docstring): in distribution for a sampled task of a run whose
    sampler does not reproduce the plain run's tokens; both ways for a sampled task of the coupled sampler when a
    scorer is there; else token identity."""
    if not _sampled_task(case.task, case.samples):
        return JudgeKind.TOKEN_IDENTITY
    if case.in_distribution:
        return JudgeKind.IN_DISTRIBUTION
    return JudgeKind.IDENTITY_AND_DISTRIBUTION if case.baseline.scorer is not None else JudgeKind.TOKEN_IDENTITY


def judge_in_distribution(case: LosslessCase) -> GateResult:
    """The task's outputs scored by the plain engine and tested as draws from its sampling distribution."""
    return GateResult.from_json(_in_distribution(case))


def _in_distribution(case: LosslessCase) -> dict[str, Any]:
    return judge_scored([s for s in case.samples if s.task == case.task], case.baseline.scorer, case.dtype)


def judge_identity(case: LosslessCase) -> GateResult:
    """Token identity with its baseline, divergences judged by their margins outside an exact dtype, the twins'
    audit applied; an UNCALIBRATED verdict reads NO-GATE."""
    return GateResult.from_json(_identity(case))


def _identity(case: LosslessCase) -> dict[str, Any]:
    task, dtype, base = case.task, case.dtype, case.baseline
    base_samples = list(base.samples)
    control_samples = list(base.control_samples) if base.control_samples is not None else None
    mine = [s for s in case.samples if s.task == task]
    check = lossless_check(mine, base_samples, dtype, case.tolerance)[task]
    floor = noise_floor(base_samples, control_samples, task) if control_samples is not None else None
    no_floor = floor_missing(base_samples, control_samples, task) if floor is None else None
    check = judge_by_margins(
        check, task, case.samples, base_samples, floor, dtype, case.tolerance, base.control_run, no_floor
    )
    rests_on = {"baseline_run": base.run_id, "baseline_kind": base.kind.value, "baseline_label": base.label}
    check = check.judged(check.verdict, check.reason, baseline=rests_on)
    if base.audit is not None:
        check = check.judged(check.verdict, check.reason, audit=audit_brief(base.audit))
        check = apply_audit(check, task, base.audit, dtype, case.tolerance, floor)
    return set_apart_failed(uncalibrated_is_no_gate(check)).record()


def judge_both(case: LosslessCase) -> GateResult:
    """Our coupled sampler at temperature > 0: identity with the baseline and sampler fidelity, each able to FAIL.
    A PASS in distribution also stands where identity could not judge (twins not auditable: NO-GATE), since its
    baseline is a plain engine of its own; the identity record keeps every field, the sampled verdict's numbers
    join it (the report plots its PIT histogram)."""
    identity = GateResult.from_json(_identity(case))
    sampled = GateResult.from_json(_in_distribution(case))
    verdict, reason = _both(identity, sampled)
    joined = {k: v for k, v in sampled.numbers.items() if k not in identity.numbers}
    halves = {
        "identity": {"verdict": identity.verdict, "reason": identity.reason},
        "in_distribution": {"verdict": sampled.verdict, "reason": sampled.reason},
    }
    order = identity.key_order + tuple(k for k in (*joined, *halves) if k not in identity.key_order)
    return GateResult(verdict, reason, {**identity.numbers, **joined, **halves}, order)


def _both(identity: GateResult, sampled: GateResult) -> tuple[str, str]:
    """The verdict and reason of the two judgements together: identity's FAIL first, then the sampled one's; a PASS
    in distribution stands where identity passed or could not judge; else identity's own."""
    same = f"token for token: {identity.reason or identity.verdict}"
    if identity.failed:
        return identity.verdict, f"{identity.reason} (in distribution: {sampled.verdict})"
    if sampled.failed:
        return Verdict.FAIL, f"{sampled.reason} ({same})"
    if sampled.passed and identity.verdict in (Verdict.PASS, Verdict.NO_GATE):
        return Verdict.PASS, f"{sampled.reason}; {same}"
    return identity.verdict, identity.reason


JUDGES: dict[JudgeKind, Judge] = {
    JudgeKind.TOKEN_IDENTITY: judge_identity,
    JudgeKind.IN_DISTRIBUTION: judge_in_distribution,
    JudgeKind.IDENTITY_AND_DISTRIBUTION: judge_both,
}
