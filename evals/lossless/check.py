"""Token identity, task by task: a spec-dec run's samples against its non-speculative baseline's.

Greedy speculative decoding must reproduce the baseline's tokens exactly, so a spec-dec bug (a wrong KV rewind, a
stale position, a rejected draft leaking out) shows up as a divergent sample long before it moves accuracy. This
module counts: identical outputs, each divergent sample's first divergent token, accuracy of both sides on the
divergent subset, the exact McNemar p-value, and the verdict of identity alone. In float32 (and float64) any
divergence fails. Elsewhere two plain runs already differ where the batch shape changes the reduction order, so
identity alone cannot judge: the verdict is UNCALIBRATED, and the gate (gate.py) judges each divergence by its
logit margin against the noise measured on a control (margins.py); a `lossless_tolerance` stored in a reference
entry, where there is one, still caps the divergent fraction.
"""

from __future__ import annotations

from typing import Any

from ...results.paired import first_divergence, mcnemar_exact
from ...results.run_summary import Verdict
from ...results.sample_record import SampleRecord
from .evidence import comparable_pairs

EXACT_DTYPES = ("float32", "float64")
MCNEMAR_FILTER = "flexible-extract"  # the filter McNemar's test counts, where the task has it (else its first)


def lossless_check(
    spec_samples: list[SampleRecord],
    base_samples: list[SampleRecord],
    dtype: str,
    tolerance: float | None = None,
) -> dict[str, dict[str, Any]]:
    """Per task: identical-output rate, first divergence of each divergent sample, accuracy of both sides on the
    divergent subset, the exact McNemar p-value (flexible-extract) and the lossless verdict."""
    # a sample is (task, document, repeat): with several samples per document, sample r pairs with the baseline's r
    base = {(s.task, s.doc_id, s.repeat): s for s in base_samples}
    out: dict[str, dict[str, Any]] = {}
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
        out[task] = {
            "num_pairs": n,
            "identical": n - d,
            "divergent": d,
            "identical_rate": round((n - d) / n, 6) if n else 0.0,
            "divergences": divergent,
            "divergent_accuracy_spec": round(100 * sum(x["spec"] for x in divergent) / d, 4) if d else None,
            "divergent_accuracy_baseline": round(100 * sum(x["baseline"] for x in divergent) / d, 4) if d else None,
            "mcnemar_p": mcnemar_exact(b_only, s_only),
            "failed_requests": failed,
            "verdict": verdict,
            "reason": why,
        }
    return out


def failed_requests(doc_ids: list[Any]) -> str:
    """The pairs a side's request failed in, in words: never counted as divergences (they hold no answer)."""
    shown = ", ".join(str(d) for d in doc_ids[:5]) + (", ..." if len(doc_ids) > 5 else "")
    return f"{len(doc_ids)} request(s) failed on a side (doc {shown}): not compared"


def set_apart_failed(check: dict[str, Any]) -> None:
    """A task in which some requests failed cannot PASS on the rest: the gate's evidence is missing there. Its verdict
    reads NO-GATE unless the compared pairs FAIL it already, and its reason says how many failed."""
    failed = check.get("failed_requests") or []
    if not failed or failed_requests(failed) in check["reason"]:
        return
    if check["verdict"] == Verdict.PASS:
        check["verdict"] = Verdict.NO_GATE
    check["reason"] = f"{check['reason']}; {failed_requests(failed)}"
