"""Token identity, task by task: a spec-dec run's samples against its non-speculative baseline's.

Greedy speculative decoding must reproduce the baseline's tokens exactly, so a spec-dec bug (a wrong KV rewind, a
stale position, a rejected draft leaking out) shows up as a divergent sample long before it moves accuracy. This
module counts identical outputs, first divergences, accuracy on the divergent subset and the exact McNemar p-value,
and gives identity's own verdict as a frozen `IdentityVerdict`: any divergence fails in float32 and float64;
elsewhere identity alone cannot judge (UNCALIBRATED) and the gate's later steps weigh each divergence's margin.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from ...results.paired import first_divergence
from ...results.run_summary import Verdict
from ...results.sample_record import SampleRecord
from ...stats.mcnemar import mcnemar_exact
from .evidence import comparable_pairs

EXACT_DTYPES = ("float32", "float64")
MCNEMAR_FILTER = "flexible-extract"  # the filter McNemar's test counts, where the task has it (else its first)


@dataclass(frozen=True)
class IdentityVerdict:
    """One task's token-identity verdict as each step of the gate leaves it (a step returns a new one). `counts` are
    identity's numbers (pairs, divergences, McNemar); the other fields are what later steps add, written in
    the record in this order after the verdict and reason."""

    counts: Mapping[str, Any]
    verdict: str
    reason: str
    comparable: bool = True  # False: samples unpaired or prompts differ, so no divergence can be judged
    noise: Mapping[str, Any] | None = None  # the control's noise floor the margins were judged against
    control_cannot_help: bool = False  # a control was recorded but gave no floor: no "record a control" advice
    margin_rule: Mapping[str, Any] | None = None
    baseline: Mapping[str, Any] | None = None  # baseline_run, baseline_kind, baseline_label
    audit: Mapping[str, Any] | None = None  # the twins' audit, in brief
    audit_margins: str | None = None  # audited twins that differ only at near-ties, in words
    uncalibrated: bool = False  # NO-GATE because nothing calibrated could judge

    @property
    def divergences(self) -> list[dict[str, Any]]:
        return self.counts["divergences"]

    def judged(self, verdict: str, reason: str, **changes: Any) -> IdentityVerdict:
        """A new verdict and reason (and any other fields)."""
        return replace(self, verdict=verdict, reason=reason, **changes)

    def record(self) -> dict[str, Any]:
        """The gate's JSON record of the task, keys in the order summary.json has always had them."""
        out = {**self.counts, "verdict": self.verdict, "reason": self.reason}
        if self.noise is not None:
            out["noise"] = dict(self.noise)
        if self.control_cannot_help:
            out["control_cannot_help"] = True
        if self.margin_rule is not None:
            out["margin_rule"] = self.margin_rule
        out.update(self.baseline or {})
        if self.audit is not None:
            out["audit"] = dict(self.audit)
        if self.audit_margins is not None:
            out["audit_margins"] = self.audit_margins
        if self.uncalibrated:
            out["uncalibrated"] = True
        return out


def lossless_check(
    spec_samples: list[SampleRecord],
    base_samples: list[SampleRecord],
    dtype: str,
    tolerance: float | None = None,
) -> dict[str, IdentityVerdict]:
    """Per task: identical-output rate, first divergence of each divergent sample, accuracy of both sides on the
    divergent subset, the exact McNemar p-value (flexible-extract) and identity's verdict."""
    # a sample is (task, document, repeat): with several samples per document, sample r pairs with the baseline's r
    base = {(s.task, s.doc_id, s.repeat): s for s in base_samples}
    out: dict[str, IdentityVerdict] = {}
    for task in sorted({s.task for s in spec_samples}):
        pairs = [(s, base.get((task, s.doc_id, s.repeat))) for s in spec_samples if s.task == task]
        missing = [s.doc_id for s, b in pairs if b is None]
        pairs, failed = comparable_pairs((s, b) for s, b in pairs if b is not None)
        mismatched = [s.doc_id for s, b in pairs if s.prompt_hash != b.prompt_hash]
        divergent = []
        for s, b in pairs:
            pos = first_divergence(s.output_token_ids, b.output_token_ids)
            if pos is not None:
                repeat = {"repeat": s.repeat} if s.repeat else {}  # named only where a document has several samples
                divergent.append({"doc_id": s.doc_id, **repeat, "position": pos, "spec": s.score, "baseline": b.score})
        filters = pairs[0][0].filters if pairs else [MCNEMAR_FILTER]
        key = MCNEMAR_FILTER if MCNEMAR_FILTER in filters or not filters else filters[0]
        b_only = sum(bool(b.correct.get(key)) and not bool(s.correct.get(key)) for s, b in pairs)
        s_only = sum(bool(s.correct.get(key)) and not bool(b.correct.get(key)) for s, b in pairs)
        n, d = len(pairs), len(divergent)
        if failed and not (mismatched or missing or pairs):
            verdict, why = Verdict.NO_GATE, f"{failed_requests(failed)}: nothing to compare"
        elif mismatched or missing or n == 0:
            verdict, why = Verdict.FAIL, f"not comparable: {len(missing)} unpaired, {len(mismatched)} different prompts"
        elif d == 0:
            verdict, why = Verdict.PASS, "every output identical to the baseline"
        elif dtype in EXACT_DTYPES:
            verdict, why = (
                Verdict.FAIL,
                f"{d} of {n} outputs differ from the baseline in {dtype} (any divergence fails)",
            )
        elif tolerance is None:
            verdict, why = Verdict.UNCALIBRATED, f"{d} of {n} differ; no calibrated lossless_tolerance for {dtype}"
        else:
            ok = d / n <= tolerance
            verdict = Verdict.PASS if ok else Verdict.FAIL
            why = f"{d} of {n} differ ({d / n:.4f} {'<=' if ok else '>'} tolerance {tolerance:.4f} for {dtype})"
        counts = {
            "num_pairs": n,
            "identical": n - d,
            "divergent": d,
            "identical_rate": round((n - d) / n, 6) if n else 0.0,
            "divergences": divergent,
            "divergent_accuracy_spec": round(100 * sum(x["spec"] for x in divergent) / d, 4) if d else None,
            "divergent_accuracy_baseline": round(100 * sum(x["baseline"] for x in divergent) / d, 4) if d else None,
            "mcnemar_p": mcnemar_exact(b_only, s_only),
            "failed_requests": failed,
        }
        out[task] = IdentityVerdict(counts, verdict, why, comparable=bool(pairs) and not (mismatched or missing))
    return out


def failed_requests(doc_ids: list[Any]) -> str:
    """The pairs a side's request failed in, in words: never counted as divergences (they hold no answer)."""
    shown = ", ".join(str(d) for d in doc_ids[:5]) + (", ..." if len(doc_ids) > 5 else "")
    return f"{len(doc_ids)} request(s) failed on a side (doc {shown}): not compared"


def set_apart_failed(check: IdentityVerdict) -> IdentityVerdict:
    """A task in which some requests failed cannot PASS on the rest: the gate's evidence is missing there. Its verdict
    reads NO-GATE unless the compared pairs FAIL it already, and its reason says how many failed."""
    failed = check.counts.get("failed_requests") or []
    if not failed or failed_requests(failed) in check.reason:
        return check
    verdict = Verdict.NO_GATE if check.verdict == Verdict.PASS else check.verdict
    return check.judged(verdict, f"{check.reason}; {failed_requests(failed)}")
