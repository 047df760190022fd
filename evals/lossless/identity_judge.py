"""The steps that turn token identity into the lossless verdict of one task, each from a frozen `IdentityVerdict`
to a new one: divergences judged by their logit margins against the control's noise (outside an exact dtype), the
paired twins' audit, UNCALIBRATED read as NO-GATE. Kept apart from the gate so each rule reads on its own."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ...results.run_summary import Verdict
from ...results.sample_record import SampleRecord
from .check import EXACT_DTYPES, IdentityVerdict
from .evidence import format_nats, judge_divergence
from .margins import FACTOR, MIN_NOISE_SAMPLES, WHAT_TO_DO, NoFloor, divergence_margin, margin_verdict

CHANGES_TARGET = "the spec-dec engine changes the target's own outputs"


def judge_by_margins(
    check: IdentityVerdict,
    task: str,
    samples: list[SampleRecord],
    base_samples: list[SampleRecord],
    floor: Mapping[str, Any] | None,
    dtype: str,
    tolerance: float | None,
    control_run: str | None,
    no_floor: NoFloor | None = None,
) -> IdentityVerdict:
    """Every divergence gets its margins (numbers and token ids); outside an exact dtype they decide the verdict
    (against the control's noise floor, with a calibrated tolerance as an upper limit)."""
    noise = None
    if floor is not None:
        noise = {k: v for k, v in floor.items() if k != "divergences"}
        noise["margins"] = [
            {"doc_id": m["doc_id"], "position": m["position"], "margin": m["judged"], "lower_bound": m["lower_bound"]}
            for m in floor["divergences"]
        ]
        noise["control_run"] = control_run
    check = check.judged(check.verdict, check.reason, noise=noise)
    if not check.divergences:
        return check
    spec = {(s.doc_id, s.repeat): s for s in samples if s.task == task}
    base = {(s.doc_id, s.repeat): s for s in base_samples if s.task == task}
    divergences = []
    for x in check.divergences:
        key = (x["doc_id"], x.get("repeat", 0))
        m = divergence_margin(base[key], spec[key])
        divergences.append(x if m is None else {**x, "margins": weigh_evidence(m, base[key], spec[key])})
    check = check.judged(check.verdict, check.reason, counts={**check.counts, "divergences": divergences})
    if dtype in EXACT_DTYPES or check.verdict == Verdict.FAIL and not check.comparable:
        return check
    flat = [
        {"doc_id": x["doc_id"], **x["margins"]} if x.get("margins") else {"doc_id": x["doc_id"]} for x in divergences
    ]
    verdict, reason, record = margin_verdict(flat, check.counts["num_pairs"], floor, tolerance, control_run, no_floor)
    classed = [
        {**x, "margins": {**x["margins"], "class": f["class"]}} if "class" in f else x
        for x, f in zip(divergences, flat, strict=True)
    ]
    return check.judged(
        verdict,
        reason,
        counts={**check.counts, "divergences": classed},
        margin_rule=record,
        control_cannot_help=floor is None and no_floor is not None and not no_floor.control_helps,
    )


def weigh_evidence(m: dict[str, Any], base: SampleRecord, spec: SampleRecord) -> dict[str, Any]:
    """A divergence's margins with what they may prove: `judged` is None and `problem` says why when a side's records
    there are not usable numbers, or the baseline named no alternative (its bound of 0 is no evidence of a near-tie:
    the spec side's exact view of the flip judges it instead, `from_reverse`)."""
    p = m["position"]
    if m.get("margin") is None:
        return m
    records = [s.logprobs[p] if s.logprobs is not None and p < len(s.logprobs) else None for s in (base, spec)]
    judged = judge_divergence(m, *records)
    weighed = {**m, "judged": judged.margin}
    if judged.problem is not None:
        weighed["problem"] = judged.problem
    if judged.from_reverse:
        weighed["from_reverse"] = True
    return weighed


def audit_brief(audit: Mapping[str, Any]) -> dict[str, Any]:
    """What the record keeps of the twins' audit."""
    return {
        "num_audited": audit["num_audited"],
        "planned": audit["planned"],
        "first_divergence": audit["first_divergence"],
    }


def apply_audit(
    check: IdentityVerdict,
    task: str,
    audit: Mapping[str, Any],
    dtype: str,
    tolerance: float | None,
    floor: Mapping[str, Any] | None = None,
) -> IdentityVerdict:
    """The twins' audit decides whether the comparison with them means anything. In an exact dtype one divergence
    anywhere (the audit stopped there) proves the spec-dec engine altered the target, for every task. Elsewhere a
    plain engine may differ from a twin by rounding: each audited divergence is judged by its margin against the
    noise of both paths it crosses (`audit_noise_bound`), or, without margins, the task's audited share is held to its
    lossless tolerance."""
    first = audit["first_divergence"]
    if dtype in EXACT_DTYPES:
        if first is not None:
            return check.judged(
                Verdict.FAIL,
                f"{CHANGES_TARGET}: the paired twin of {first['task']} doc {first['doc_id']} "
                f"differs from a plain engine's output at token {first['position']} (audit of "
                f"{audit['num_audited']} of {audit['planned']} planned documents, stopped at the "
                "first divergence); the twins are no baseline",
            )
        if not audit["num_audited"] and check.verdict == Verdict.PASS:
            why = "the paired twins could not be audited (no greedy or seeded document); no baseline"
            return check.judged(Verdict.NO_GATE, why)
        return check
    mine = [d for d in audit["audited"] if d["task"] == task]
    diverged = [d for d in audit["divergences"] if d["task"] == task]
    if not diverged:
        if not mine and check.verdict == Verdict.PASS:
            return check.judged(Verdict.NO_GATE, "no document of this task was audited; no baseline")
        return check
    judged = [d["margins"] for d in diverged if (d.get("margins") or {}).get("judged") is not None]
    if floor is not None and len(judged) == len(diverged):
        return _audit_by_margins(check, dtype, max(judged, key=lambda m: m["judged"]), floor, audit, diverged, mine)
    share = len(diverged) / len(mine)
    if tolerance is None:
        return check.judged(
            Verdict.UNCALIBRATED,
            f"{len(diverged)} of {len(mine)} audited twins differ from a plain engine in {dtype}; "
            "no calibrated lossless_tolerance to judge whether the spec-dec engine altered the "
            "target",
        )
    if share > tolerance:
        return check.judged(
            Verdict.FAIL,
            f"{CHANGES_TARGET}: {len(diverged)} of {len(mine)} audited twins differ from a plain "
            f"engine ({share:.4f} > tolerance {tolerance:.4f} for {dtype})",
        )
    return check


def _audit_by_margins(
    check: IdentityVerdict,
    dtype: str,
    worst: Mapping[str, Any],
    floor: Mapping[str, Any],
    audit: Mapping[str, Any],
    diverged: list[Any],
    mine: list[Any],
) -> IdentityVerdict:
    """The audited twins' largest margin against the noise bound of the paths they cross."""
    bound, whose = audit_noise_bound(floor, audit.get("path_noise"))
    counted = f"{len(diverged)} of {len(mine)} audited twins differ"
    if bound is None:  # the audit's own path has no measured noise: it cannot tell rounding from a bug
        return check.judged(
            Verdict.NO_GATE,
            f"{counted} from a plain engine (largest margin {format_nats(worst['judged'])} nats) "
            f"across kernel paths whose noise was not measured ({whose})",
        )
    if bound < worst["judged"] <= (step := dtype_step(dtype, worst)):
        # One step of the dtype at that logprob is the least any change of rounding moves it by: a twin decoded
        # beside verify rows takes a kernel path neither measurement covers, so such a flip cannot be judged.
        return check.judged(
            Verdict.NO_GATE,
            f"{counted} from a plain engine, the largest by {format_nats(worst['judged'])} nats: "
            f"one {dtype} step there ({format_nats(step)}), which rounding on the twins' kernel "
            f"path (beside verify rows) may move and no measured path bounds ({whose})",
        )
    if worst["judged"] > bound:
        return check.judged(
            Verdict.FAIL,
            f"{CHANGES_TARGET}: an audited twin differs from a plain engine with margin "
            f"{format_nats(worst['judged'])} nats, beyond the noise bound {format_nats(bound)} "
            f"({whose}) ({counted})",
        )
    near_ties = (
        f"{counted} from a plain engine, all at near-ties (largest margin "
        f"{format_nats(worst['judged'])} within the noise bound {format_nats(bound)}: "
        f"{whose})"
    )
    return check.judged(check.verdict, check.reason, audit_margins=near_ties)


MANTISSA_BITS = {"bfloat16": 7, "float16": 10}


def dtype_step(dtype: str, margins: Mapping[str, Any]) -> float:
    """The spacing of `dtype`'s numbers at the larger of the two logprobs a divergence compares (0 for a dtype not
    listed): the smallest move a change of rounding can make there."""
    bits = MANTISSA_BITS.get(dtype)
    values = [abs(float(margins[k])) for k in ("baseline_logprob", "other_logprob") if margins.get(k) is not None]
    if bits is None or not values or max(values) == 0:
        return 0.0
    return 2.0 ** (math.floor(math.log2(max(values))) - bits) + 1e-5  # stored logprobs are rounded to 5 decimals


def audit_noise_bound(floor: Mapping[str, Any], path: Mapping[str, Any] | None) -> tuple[float | None, str]:
    """The bound an audited divergence is judged against, and whose noise it is: the control's (plain at another
    batch shape) and the audit's own path's (a plain engine's prefill-shaped scoring against its decode), each
    FACTOR x its largest move; None when the path's noise was not measured on enough positions."""
    if not path or path.get("num_noise_samples", 0) < MIN_NOISE_SAMPLES:
        got = path.get("num_noise_samples", 0) if path else 0
        return None, f"the audit's prefill-against-decode path: {got} gap moves, fewer than {MIN_NOISE_SAMPLES}"
    own = round(FACTOR * path["max_gap_move"], 5)
    whose = (
        f"the larger of the control's {format_nats(floor['bound'])} and the audit path's {format_nats(own)}, "
        f"from {path['num_noise_samples']} gap moves of a plain engine's prefill against its decode"
    )
    return max(floor["bound"], own), whose


def uncalibrated_is_no_gate(check: IdentityVerdict) -> IdentityVerdict:
    """A gate that could not judge never reads PASS: UNCALIBRATED is NO-GATE for losslessness, with what to do."""
    if check.verdict != Verdict.UNCALIBRATED:
        return check
    reason = check.reason
    if WHAT_TO_DO not in reason and not check.control_cannot_help:
        reason = f"UNCALIBRATED: {reason}; {WHAT_TO_DO}"
    elif not reason.startswith(Verdict.UNCALIBRATED):
        reason = f"UNCALIBRATED: {reason}"
    return check.judged(Verdict.NO_GATE, reason, uncalibrated=True)
