"""The lossless gate of a spec-dec run: every sample against its non-speculative baseline, task by task.

THE RULE TODAY. A greedy spec-dec run must emit its baseline's tokens exactly (check.py). In float32 any divergence
FAILs. In other dtypes two plain runs already differ by rounding, so each divergence is judged by the baseline's
logit margin at its first divergent token against the noise measured on a control, the plain side decoded again at
another batch shape (margins.py, control.py): FAIL beyond 2 x the largest noise or at a divergence rate above the
control's; without a control (or logprobs) the gate cannot judge and says NO-GATE ("UNCALIBRATED: ..."), never PASS.
A calibrated `lossless_tolerance` in a reference entry still caps the divergent fraction. A paired run's twins count
as a baseline only as far as their audit on a plain engine shows (twin_audit.py); each verdict names the baseline it
rests on (baseline.py).

KINDS OF VERDICT. `JUDGES` maps a kind to the function that judges one task; `verdict_kind` picks it. Token identity
("identity") serves greedy tasks. A sampled task of a run whose sampler does not reproduce the plain run's tokens
(`--spec-sampling rejection`, any server) is judged in distribution ("sampled", scoring.py): the plain engine scores
the run's outputs by teacher forcing, no decoded baseline needed. A sampled task of our coupled sampler, which does
reproduce them, is judged both ways ("coupled"): token identity with its baseline (a key shift shows only there) and
in distribution against an independent plain engine's scoring, which gives the verdict its baseline when the paired
twins cannot be audited at temperature > 0 (their per-request seeds live in the run's engine only).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ...results import store
from ...results.run_summary import GateResult, RunSummary, Verdict
from ...results.sample_record import SampleRecord
from ...workers.interface import EngineIdentity
from ..run_types import EvalOptions, TaskResult
from .baseline import BASELINE_KINDS, BaselineRef, baseline_label, open_baseline
from .check import EXACT_DTYPES, lossless_check, set_apart_failed
from .control import find_control
from .evidence import format_nats, judge_divergence
from .margins import (
    FACTOR,
    MIN_NOISE_SAMPLES,
    WHAT_TO_DO,
    NoFloor,
    divergence_margin,
    floor_missing,
    margin_verdict,
    noise_floor,
)
from .scoring import Scorer, judge_scored, judged_in_distribution, sampling_of

CHANGES_TARGET = "the spec-dec engine changes the target's own outputs"


@dataclass(frozen=True)
class LosslessCase:
    """What one task's lossless verdict rests on."""

    task: str
    samples: list[SampleRecord]  # the spec-dec run's samples (every task's)
    baseline_samples: list[SampleRecord]
    baseline_run: str | None  # its run id (None: no decoded baseline; a sampled verdict needs none)
    baseline: BaselineRef
    kind: str  # the baseline's kind: "twin" | "separate" | "recorded"
    dtype: str  # what ran: float32 and float64 are exact
    tolerance: float | None  # the task's calibrated lossless_tolerance, if its reference entry has one
    control_samples: list[SampleRecord] | None  # the noise-floor control's samples (None: no control found)
    control_run: str | None
    in_distribution: bool = False  # the run's sampler does not reproduce a plain run's tokens (scoring.py)
    scorer: Scorer | None = None  # the plain engine that scores sampled outputs (a sampled verdict's baseline)


Judge = Callable[[LosslessCase], dict[str, Any]]  # one task's gate record (GateResult.from_json reads it)


def apply_lossless_gate(
    summary: RunSummary,
    samples: list[SampleRecord],
    identity: EngineIdentity,
    out: str,
    options: EvalOptions,
    results: list[TaskResult],
    baseline: BaselineRef,
) -> RunSummary:
    """The summary with each task's lossless gate and the baseline it rests on (a FAIL fails the run)."""
    gates, record = evaluate_lossless(summary.tasks, samples, identity, out, options, results, baseline)
    for task, gate in gates.items():
        summary = summary.with_task_gate(task, "lossless", gate)
    return summary if record is None else summary.replace(baseline=record)


def evaluate_lossless(
    tasks: Iterable[str],
    samples: list[SampleRecord],
    identity: EngineIdentity,
    out: str,
    options: EvalOptions,
    results: list[TaskResult],
    baseline: BaselineRef,
) -> tuple[dict[str, GateResult], dict[str, Any] | None]:
    """Compare every spec-dec sample with the baseline: each task's GateResult, and the baseline's record (None
    when no baseline was found: every task is NO-BASELINE)."""
    dtype = identity.resolved_dtype or identity.dtype
    in_distribution = judged_in_distribution(identity)
    scored = {t for t in tasks if in_distribution and _sampled_task(t, samples)}
    base = open_baseline(baseline, identity, out, options) if baseline.kind != "scored" else None
    if base is None:
        why = f"no finished baseline run under {out}"
        gates = {task: GateResult(Verdict.NO_BASELINE, why) for task in tasks if task not in scored}
        for task in sorted(scored):  # a sampled verdict needs no decoded baseline: the plain engine scores
            case = LosslessCase(
                task, samples, [], None, baseline, "scored", dtype, None, None, None, True, baseline.scorer
            )
            gates[task] = GateResult.from_json(JUDGES["sampled"](case))
        record = {"run": None, "kind": "scored", "label": baseline_label("scored", None)} if scored else None
        return gates, record
    tolerances = {r.task: (r.reference.entry.get("lossless_tolerance") if r.reference else None) for r in results}
    base_samples = base.samples()
    kind = baseline.kind if baseline.kind in BASELINE_KINDS else "recorded"
    control = store.open_run(baseline.control) if baseline.control else find_control(out, identity, options)
    control_samples = control.samples() if control is not None else None
    gates = {}
    for task in sorted({s.task for s in samples}):
        case = LosslessCase(
            task,
            samples,
            base_samples,
            base.run_id,
            baseline,
            kind,
            dtype,
            tolerances.get(task),
            control_samples,
            control.run_id if control is not None else None,
            in_distribution,
            baseline.scorer,
        )
        gates[task] = GateResult.from_json(JUDGES[verdict_kind(case)](case))
    record = {
        "run": base.run_id,
        "kind": kind,
        "label": baseline_label(kind, baseline.audit),
        **({"audit": baseline.audit} if baseline.audit is not None else {}),
    }
    return gates, record


def _sampled_task(task: str, samples: list[SampleRecord]) -> bool:
    """Whether the task's outputs were sampled (temperature > 0), as its records say."""
    return any(s.task == task and sampling_of(s) is not None for s in samples)


def verdict_kind(case: LosslessCase) -> str:
    """Which judge decides a task (see the module docstring): in distribution for a sampled task of a run whose
    sampler does not reproduce the plain run's tokens; both ways for a sampled task of the coupled sampler when a
    scorer is there; else token identity."""
    if not _sampled_task(case.task, case.samples):
        return "identity"
    if case.in_distribution:
        return "sampled"
    return "coupled" if case.scorer is not None else "identity"


def judge_in_distribution(case: LosslessCase) -> dict[str, Any]:
    """The task's outputs scored by the plain engine and tested as draws from its sampling distribution."""
    return judge_scored([s for s in case.samples if s.task == case.task], case.scorer, case.dtype)


def judge_identity(case: LosslessCase) -> dict[str, Any]:
    """Token identity with its baseline, divergences judged by their margins outside an exact dtype, the twins'
    audit applied; an UNCALIBRATED verdict reads NO-GATE."""
    task, dtype = case.task, case.dtype
    mine = [s for s in case.samples if s.task == task]
    check = lossless_check(mine, case.baseline_samples, dtype, case.tolerance)[task]
    floor = noise_floor(case.baseline_samples, case.control_samples, task) if case.control_samples is not None else None
    no_floor = floor_missing(case.baseline_samples, case.control_samples, task) if floor is None else None
    judge_by_margins(
        check, task, case.samples, case.baseline_samples, floor, dtype, case.tolerance, case.control_run, no_floor
    )
    check["baseline_run"] = case.baseline_run
    check["baseline_kind"] = case.kind
    check["baseline_label"] = baseline_label(case.kind, case.baseline.audit)
    audit = case.baseline.audit
    if audit is not None:
        check["audit"] = _audit_brief(audit)
        _apply_audit(check, task, audit, dtype, case.tolerance, floor)
    uncalibrated_is_no_gate(check)
    set_apart_failed(check)
    return check


def judge_coupled(case: LosslessCase) -> dict[str, Any]:
    """Our coupled sampler at temperature > 0: identity with the baseline and sampler fidelity, each able to FAIL.
    A PASS in distribution also stands where identity could not judge (twins not auditable: NO-GATE), since its
    baseline is a plain engine of its own; the identity record keeps every field, the sampled verdict's numbers
    join it (the report plots its PIT histogram)."""
    identity = judge_identity(case)
    sampled = judge_in_distribution(case)
    check = {**identity, **{k: v for k, v in sampled.items() if k not in identity and k not in ("verdict", "reason")}}
    check["identity"] = {"verdict": identity["verdict"], "reason": identity.get("reason", "")}
    check["in_distribution"] = {"verdict": sampled["verdict"], "reason": sampled.get("reason", "")}
    same = f"token for token: {identity.get('reason') or identity['verdict']}"
    if identity["verdict"] == Verdict.FAIL:
        check["reason"] = f"{identity['reason']} (in distribution: {sampled['verdict']})"
    elif sampled["verdict"] == Verdict.FAIL:
        check["verdict"], check["reason"] = Verdict.FAIL, f"{sampled['reason']} ({same})"
    elif sampled["verdict"] == Verdict.PASS and identity["verdict"] in (Verdict.PASS, Verdict.NO_GATE):
        check["verdict"], check["reason"] = Verdict.PASS, f"{sampled['reason']}; {same}"
    return check


JUDGES: dict[str, Judge] = {"identity": judge_identity, "sampled": judge_in_distribution, "coupled": judge_coupled}


def _audit_brief(audit: dict[str, Any]) -> dict[str, Any]:
    return {
        "num_audited": audit["num_audited"],
        "planned": audit["planned"],
        "first_divergence": audit["first_divergence"],
    }


def _apply_audit(
    check: dict[str, Any],
    task: str,
    audit: dict[str, Any],
    dtype: str,
    tolerance: float | None,
    floor: dict[str, Any] | None = None,
) -> None:
    """The twins' audit decides whether the comparison with them means anything. In an exact dtype one divergence
    anywhere (the audit stopped there) proves the spec-dec engine altered the target, for every task. Elsewhere a
    plain engine may differ from a twin by rounding: each audited divergence is judged by its margin against the
    noise of both paths it crosses (`audit_noise_bound`), or, without margins, the task's audited share is held to its
    lossless tolerance."""
    first = audit["first_divergence"]
    if dtype in EXACT_DTYPES:
        if first is not None:
            check["verdict"] = Verdict.FAIL
            check["reason"] = (
                f"{CHANGES_TARGET}: the paired twin of {first['task']} doc {first['doc_id']} "
                f"differs from a plain engine's output at token {first['position']} (audit of "
                f"{audit['num_audited']} of {audit['planned']} planned documents, stopped at the "
                "first divergence); the twins are no baseline"
            )
        elif not audit["num_audited"] and check["verdict"] == Verdict.PASS:
            check["verdict"] = Verdict.NO_GATE
            check["reason"] = "the paired twins could not be audited (no greedy or seeded document); no baseline"
        return
    mine = [d for d in audit["audited"] if d["task"] == task]
    diverged = [d for d in audit["divergences"] if d["task"] == task]
    if not diverged:
        if not mine and check["verdict"] == Verdict.PASS:
            check["verdict"], check["reason"] = Verdict.NO_GATE, "no document of this task was audited; no baseline"
        return
    share = len(diverged) / len(mine)
    judged = [d["margins"] for d in diverged if (d.get("margins") or {}).get("judged") is not None]
    if floor is not None and len(judged) == len(diverged):
        worst = max(judged, key=lambda m: m["judged"])
        bound, whose = audit_noise_bound(floor, audit.get("path_noise"))
        counted = f"{len(diverged)} of {len(mine)} audited twins differ"
        if bound is None:  # the audit's own path has no measured noise: it cannot tell rounding from a bug
            check["verdict"] = Verdict.NO_GATE
            check["reason"] = (
                f"{counted} from a plain engine (largest margin {format_nats(worst['judged'])} nats) "
                f"across kernel paths whose noise was not measured ({whose})"
            )
        elif bound < worst["judged"] <= (step := dtype_step(dtype, worst)):
            # One step of the dtype at that logprob is the least any change of rounding moves it by: a twin decoded
            # beside verify rows takes a kernel path neither measurement covers, so such a flip cannot be judged.
            check["verdict"] = Verdict.NO_GATE
            check["reason"] = (
                f"{counted} from a plain engine, the largest by {format_nats(worst['judged'])} nats: "
                f"one {dtype} step there ({format_nats(step)}), which rounding on the twins' kernel "
                f"path (beside verify rows) may move and no measured path bounds ({whose})"
            )
        elif worst["judged"] > bound:
            check["verdict"] = Verdict.FAIL
            check["reason"] = (
                f"{CHANGES_TARGET}: an audited twin differs from a plain engine with margin "
                f"{format_nats(worst['judged'])} nats, beyond the noise bound {format_nats(bound)} "
                f"({whose}) ({counted})"
            )
        else:
            check["audit_margins"] = (
                f"{counted} from a plain engine, all at near-ties (largest margin "
                f"{format_nats(worst['judged'])} within the noise bound {format_nats(bound)}: "
                f"{whose})"
            )
        return
    if tolerance is None:
        check["verdict"] = Verdict.UNCALIBRATED
        check["reason"] = (
            f"{len(diverged)} of {len(mine)} audited twins differ from a plain engine in {dtype}; "
            "no calibrated lossless_tolerance to judge whether the spec-dec engine altered the "
            "target"
        )
    elif share > tolerance:
        check["verdict"] = Verdict.FAIL
        check["reason"] = (
            f"{CHANGES_TARGET}: {len(diverged)} of {len(mine)} audited twins differ from a plain "
            f"engine ({share:.4f} > tolerance {tolerance:.4f} for {dtype})"
        )


MANTISSA_BITS = {"bfloat16": 7, "float16": 10}


def dtype_step(dtype: str, margins: dict[str, Any]) -> float:
    """The spacing of `dtype`'s numbers at the larger of the two logprobs a divergence compares (0 for a dtype not
    listed): the smallest move a change of rounding can make there."""
    bits = MANTISSA_BITS.get(dtype)
    values = [abs(float(margins[k])) for k in ("baseline_logprob", "other_logprob") if margins.get(k) is not None]
    if bits is None or not values or max(values) == 0:
        return 0.0
    return 2.0 ** (math.floor(math.log2(max(values))) - bits) + 1e-5  # stored logprobs are rounded to 5 decimals


def audit_noise_bound(floor: dict[str, Any], path: dict[str, Any] | None) -> tuple[float | None, str]:
    """The bound an audited divergence is judged against, and whose noise it is: the control's (plain at another
    batch shape) and the audit's own path's (a plain engine's prefill-shaped scoring against its decode, twin_audit.py),
    each FACTOR x its largest move; None when the path's noise was not measured on enough positions."""
    if not path or path.get("num_noise_samples", 0) < MIN_NOISE_SAMPLES:
        got = path.get("num_noise_samples", 0) if path else 0
        return None, f"the audit's prefill-against-decode path: {got} gap moves, fewer than {MIN_NOISE_SAMPLES}"
    own = round(FACTOR * path["max_gap_move"], 5)
    whose = (
        f"the larger of the control's {format_nats(floor['bound'])} and the audit path's {format_nats(own)}, "
        f"from {path['num_noise_samples']} gap moves of a plain engine's prefill against its decode"
    )
    return max(floor["bound"], own), whose


def judge_by_margins(
    check: dict[str, Any],
    task: str,
    samples: list[SampleRecord],
    base_samples: list[SampleRecord],
    floor: dict[str, Any] | None,
    dtype: str,
    tolerance: float | None,
    control_run: str | None,
    no_floor: NoFloor | None = None,
) -> None:
    """Every divergence gets its margins (numbers and token ids); outside an exact dtype they decide the verdict
    (margins.py: against the control's noise floor, with a calibrated tolerance as an upper limit)."""
    if floor is not None:
        check["noise"] = {k: v for k, v in floor.items() if k != "divergences"}
        check["noise"]["margins"] = [
            {"doc_id": m["doc_id"], "position": m["position"], "margin": m["judged"], "lower_bound": m["lower_bound"]}
            for m in floor["divergences"]
        ]
        check["noise"]["control_run"] = control_run
    if not check["divergences"]:
        return
    spec = {(s.doc_id, s.repeat): s for s in samples if s.task == task}
    base = {(s.doc_id, s.repeat): s for s in base_samples if s.task == task}
    for x in check["divergences"]:
        key = (x["doc_id"], x.get("repeat", 0))
        m = divergence_margin(base[key], spec[key])
        if m is not None:
            x["margins"] = weigh_evidence(m, base[key], spec[key])
    if dtype in EXACT_DTYPES or check["verdict"] == Verdict.FAIL and check["reason"].startswith("not comparable"):
        return
    flat = [
        {"doc_id": x["doc_id"], **x["margins"]} if x.get("margins") else {"doc_id": x["doc_id"]}
        for x in check["divergences"]
    ]
    verdict, reason, record = margin_verdict(flat, check["num_pairs"], floor, tolerance, control_run, no_floor)
    if floor is None and no_floor is not None and not no_floor.control_helps:
        check["control_cannot_help"] = True  # no "record a control" advice: one was recorded
    for x, f in zip(check["divergences"], flat, strict=True):
        if "class" in f:
            x["margins"]["class"] = f["class"]
    check["verdict"], check["reason"], check["margin_rule"] = verdict, reason, record


def weigh_evidence(m: dict[str, Any], base: SampleRecord, spec: SampleRecord) -> dict[str, Any]:
    """A divergence's margins with what they may prove (evidence.py): `judged` is None and `problem` says why when
    a side's records there are not usable numbers, or the baseline named no alternative (its bound of 0 is no
    evidence of a near-tie: the spec side's exact view of the flip judges it instead, `from_reverse`)."""
    p = m["position"]
    if m.get("margin") is None:
        return m
    records = [s.logprobs[p] if s.logprobs is not None and p < len(s.logprobs) else None for s in (base, spec)]
    judged = judge_divergence(m, *records)
    m["judged"] = judged.margin
    if judged.problem is not None:
        m["problem"] = judged.problem
    if judged.from_reverse:
        m["from_reverse"] = True
    return m


def uncalibrated_is_no_gate(check: dict[str, Any]) -> None:
    """A gate that could not judge never reads PASS: UNCALIBRATED is NO-GATE for losslessness, with what to do."""
    if check["verdict"] == Verdict.UNCALIBRATED:
        check["verdict"] = Verdict.NO_GATE
        check["uncalibrated"] = True
        if WHAT_TO_DO not in check["reason"] and not check.get("control_cannot_help"):
            check["reason"] = f"UNCALIBRATED: {check['reason']}; {WHAT_TO_DO}"
        elif not check["reason"].startswith(Verdict.UNCALIBRATED):
            check["reason"] = f"UNCALIBRATED: {check['reason']}"
