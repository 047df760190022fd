"""The lossless gate of a spec-dec run: every sample against a non-speculative baseline (results/lossless.py), and
what that baseline is. A verdict is only as independent as its baseline, so each task's `lossless` record names
the kind it rests on:

- "twin": the plain twins of a paired run, decoded in the spec-dec engine from the same prefill, trusted only as far
  as their audit on a plain engine shows (evals/pipeline/twin_audit.py); a divergence there FAILs the gate;
- "separate": a plain run this command just made, on an engine with no spec worker;
- "recorded": a finished plain run found in the runs folder, or the one `--baseline RUN` names (checked first:
  evals/gates/baseline_check.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ...errors import UserError
from ...results import store
from ...results.lossless import EXACT_DTYPES, lossless_check
from ...results.run_summary import GateResult, RunSummary
from ...workers.interface import EngineIdentity
from ..pipeline.control import find_control
from ..pipeline.evaluation import EvalOptions, TaskResult
from ..pipeline.run_identity import baseline_identity, find_baseline
from .baseline_check import baseline_problem
from .margins import WHAT_TO_DO, divergence_margin, margin_verdict, noise_floor

BASELINE_KINDS = {
    "twin": "paired twin, audited",
    "separate": "separate plain run",
    "recorded": "recorded plain run",
}
CHANGES_TARGET = "the spec-dec engine changes the target's own outputs"


@dataclass(frozen=True)
class BaselineRef:
    """Which run a lossless gate compares with (None: look one up) and what kind of baseline it is."""

    run: str | None
    kind: str  # "twin" | "separate" | "recorded" | "none" (a run with no lossless gate)
    audit: dict[str, Any] | None = None  # the twins' audit (kind "twin")
    checked: bool = False  # `--baseline RUN`: must pass baseline_problem first
    # The noise-floor control's run folder when the caller made or found it (an endpoint's: keyed by the baseline
    # server, which the spec-dec run's own identity cannot name); None: looked up from the run's identity.
    control: str | None = None


def apply_lossless_gate(summary: RunSummary, samples: list[dict], identity: EngineIdentity, out: str,
                        options: EvalOptions, results: list[TaskResult],
                        baseline: BaselineRef) -> RunSummary:  # fmt: skip
    """The summary with each task's lossless gate and the baseline it rests on (a FAIL fails the run)."""
    gates, record = evaluate_lossless(summary.tasks, samples, identity, out, options, results, baseline)
    for task, gate in gates.items():
        summary = summary.with_task_gate(task, "lossless", gate)
    return summary if record is None else summary.replace(baseline=record)


def evaluate_lossless(tasks: Iterable[str], samples: list[dict], identity: EngineIdentity, out: str,
                      options: EvalOptions, results: list[TaskResult],
                      baseline: BaselineRef) -> tuple[dict[str, GateResult], dict[str, Any] | None]:  # fmt: skip
    """Compare every spec-dec sample with the baseline: each task's GateResult, and the baseline's record (None
    when no baseline was found: every task is NO-BASELINE)."""
    base = _open(baseline, identity, out, options)
    if base is None:
        why = f"no finished baseline run under {out}"
        return {task: GateResult("NO-BASELINE", why) for task in tasks}, None
    gates = {}
    dtype = identity.resolved_dtype or identity.dtype
    tolerances = {r.task: (r.reference.entry.get("lossless_tolerance") if r.reference else None) for r in results}
    base_samples = base.samples()
    kind = baseline.kind if baseline.kind in BASELINE_KINDS else "recorded"
    control = store.open_run(baseline.control) if baseline.control else find_control(out, identity, options)
    control_samples = control.samples() if control is not None else []
    for task, check in lossless_check(samples, base_samples, dtype).items():
        if tolerances.get(task) is not None and check["verdict"] == "UNCALIBRATED":
            check = lossless_check([s for s in samples if s["task"] == task], base_samples, dtype,
                                   tolerances[task])[task]  # fmt: skip
        floor = noise_floor(base_samples, control_samples, task) if control is not None else None
        judge_by_margins(check, task, samples, base_samples, floor, dtype, tolerances.get(task),
                         control.run_id if control is not None else None)  # fmt: skip
        check["baseline_run"] = base.run_id
        check["baseline_kind"] = kind
        check["baseline_label"] = baseline_label(kind, baseline.audit)
        if baseline.audit is not None:
            check["audit"] = _audit_brief(baseline.audit)
            _apply_audit(check, task, baseline.audit, dtype, tolerances.get(task), floor)
        uncalibrated_is_no_gate(check)
        gates[task] = GateResult.from_json(check)
    record = {"run": base.run_id, "kind": kind, "label": baseline_label(kind, baseline.audit),
              **({"audit": baseline.audit} if baseline.audit is not None else {})}  # fmt: skip
    return gates, record


def baseline_label(kind: str, audit: dict[str, Any] | None) -> str:
    """In words, e.g. "paired twin, audited on 3 of 3 planned documents" or "separate plain run"."""
    if kind == "twin" and audit is not None:
        return f"paired twin, audited on {audit['num_audited']} of {audit['planned']} planned documents"
    return BASELINE_KINDS[kind]


def _open(baseline: BaselineRef, identity: EngineIdentity, out: str, options: EvalOptions) -> store.Run | None:
    if baseline.run is None:
        return find_baseline(out, baseline_identity(identity), options)
    try:
        base = store.open_run(baseline.run, out)
    except (FileNotFoundError, ValueError) as e:
        raise UserError(f"--baseline: {e}") from None
    if baseline.checked:
        problem = baseline_problem(base, identity, options)
        if problem is not None:
            raise UserError(f"--baseline: {problem}")
    elif not base.is_finished:
        raise UserError(f"--baseline: run {base.run_id} is not finished")
    return base


def _audit_brief(audit: dict[str, Any]) -> dict[str, Any]:
    return {"num_audited": audit["num_audited"], "planned": audit["planned"],
            "first_divergence": audit["first_divergence"]}  # fmt: skip


def _apply_audit(check: dict[str, Any], task: str, audit: dict[str, Any], dtype: str, tolerance: float | None,
                 floor: dict[str, Any] | None = None) -> None:  # fmt: skip
    """The twins' audit decides whether the comparison with them means anything. In an exact dtype one divergence
    anywhere (the audit stopped there) proves the spec-dec engine altered the target, for every task. Elsewhere a
    plain engine may differ from a twin by rounding: each audited divergence is judged by its margin against the
    control's noise bound (evals/gates/margins.py), or, without margins, the task's audited share is held to its
    lossless tolerance."""
    first = audit["first_divergence"]
    if dtype in EXACT_DTYPES:
        if first is not None:
            check["verdict"] = "FAIL"
            check["reason"] = (f"{CHANGES_TARGET}: the paired twin of {first['task']} doc {first['doc_id']} "
                               f"differs from a plain engine's output at token {first['position']} (audit of "
                               f"{audit['num_audited']} of {audit['planned']} planned documents, stopped at the "
                               "first divergence); the twins are no baseline")  # fmt: skip
        elif not audit["num_audited"] and check["verdict"] == "PASS":
            check["verdict"] = "NO-GATE"
            check["reason"] = "the paired twins could not be audited (no greedy or seeded document); no baseline"
        return
    mine = [d for d in audit["audited"] if d["task"] == task]
    diverged = [d for d in audit["divergences"] if d["task"] == task]
    if not diverged:
        if not mine and check["verdict"] == "PASS":
            check["verdict"], check["reason"] = "NO-GATE", "no document of this task was audited; no baseline"
        return
    share = len(diverged) / len(mine)
    judged = [d["margins"] for d in diverged if (d.get("margins") or {}).get("judged") is not None]
    if floor is not None and len(judged) == len(diverged):
        worst = max(judged, key=lambda m: m["judged"])
        if worst["judged"] > floor["bound"]:
            check["verdict"] = "FAIL"
            check["reason"] = (f"{CHANGES_TARGET}: an audited twin differs from a plain engine with margin "
                               f"{worst['judged']:.3f} nats, beyond the control's noise bound {floor['bound']:.4f} "
                               f"({len(diverged)} of {len(mine)} audited twins differ)")  # fmt: skip
        else:
            check["audit_margins"] = (f"{len(diverged)} of {len(mine)} audited twins differ from a plain engine, "
                                      f"all at near-ties (largest margin {worst['judged']:.4f} within the "
                                      f"control's noise bound {floor['bound']:.4f})")  # fmt: skip
        return
    if tolerance is None:
        check["verdict"] = "UNCALIBRATED"
        check["reason"] = (f"{len(diverged)} of {len(mine)} audited twins differ from a plain engine in {dtype}; "
                           "no calibrated lossless_tolerance to judge whether the spec-dec engine altered the "
                           "target")  # fmt: skip
    elif share > tolerance:
        check["verdict"] = "FAIL"
        check["reason"] = (f"{CHANGES_TARGET}: {len(diverged)} of {len(mine)} audited twins differ from a plain "
                           f"engine ({share:.4f} > tolerance {tolerance:.4f} for {dtype})")  # fmt: skip


def judge_by_margins(check: dict[str, Any], task: str, samples: list[dict], base_samples: list[dict],
                     floor: dict[str, Any] | None, dtype: str, tolerance: float | None,
                     control_run: str | None) -> None:  # fmt: skip
    """Every divergence gets its margins (numbers and token ids); outside an exact dtype they decide the verdict
    (evals/gates/margins.py: against the control's noise floor, with a calibrated tolerance as an upper limit)."""
    if floor is not None:
        check["noise"] = {k: v for k, v in floor.items() if k != "divergences"}
        check["noise"]["margins"] = [{"doc_id": m["doc_id"], "position": m["position"], "margin": m["judged"],
                                      "lower_bound": m["lower_bound"]} for m in floor["divergences"]]  # fmt: skip
        check["noise"]["control_run"] = control_run
    if not check["divergences"]:
        return
    spec = {s["doc_id"]: s for s in samples if s["task"] == task}
    base = {s["doc_id"]: s for s in base_samples if s["task"] == task}
    for x in check["divergences"]:
        m = divergence_margin(base[x["doc_id"]], spec[x["doc_id"]])
        if m is not None:
            x["margins"] = m
    if dtype in EXACT_DTYPES or check["verdict"] == "FAIL" and check["reason"].startswith("not comparable"):
        return
    flat = [{"doc_id": x["doc_id"], **x["margins"]} if x.get("margins") else {"doc_id": x["doc_id"]}
            for x in check["divergences"]]  # fmt: skip
    verdict, reason, record = margin_verdict(flat, check["num_pairs"], floor, tolerance, control_run)
    for x, f in zip(check["divergences"], flat, strict=True):
        if "class" in f:
            x["margins"]["class"] = f["class"]
    check["verdict"], check["reason"], check["margin_rule"] = verdict, reason, record


def uncalibrated_is_no_gate(check: dict[str, Any]) -> None:
    """A gate that could not judge never reads PASS: UNCALIBRATED is NO-GATE for losslessness, with what to do."""
    if check["verdict"] == "UNCALIBRATED":
        check["verdict"] = "NO-GATE"
        check["uncalibrated"] = True
        if WHAT_TO_DO not in check["reason"]:
            check["reason"] = f"UNCALIBRATED: {check['reason']}; {WHAT_TO_DO}"
        elif not check["reason"].startswith("UNCALIBRATED"):
            check["reason"] = f"UNCALIBRATED: {check['reason']}"
