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

EXACT_DTYPES = ("float32", "float64")
MCNEMAR_FILTER = "flexible-extract"  # the filter McNemar's test counts, where the task has it (else its first)


def _filters(sample: dict[str, Any]) -> list[str]:
    """The filters a sample was scored on: its `correct[...]` fields (GSM8K's and GPQA's: strict-match and
    flexible-extract); another task's columns in the same run are None on this sample."""
    return [k[len("correct[") : -1] for k, v in sample.items() if k.startswith("correct[") and v is not None]


def _score(sample: dict[str, Any]) -> float:
    """A sample's contribution to the task score: the mean of its filters' correctness."""
    filters = _filters(sample)
    return sum(bool(sample[f"correct[{f}]"]) for f in filters) / len(filters) if filters else 0.0


def lossless_check(
    spec_samples: list[dict[str, Any]],
    base_samples: list[dict[str, Any]],
    dtype: str,
    tolerance: float | None = None,
) -> dict[str, dict[str, Any]]:
    """Per task: identical-output rate, first divergence of each divergent sample, accuracy of both sides on the
    divergent subset, the exact McNemar p-value (flexible-extract) and the lossless verdict."""
    base = {(s["task"], s["doc_id"]): s for s in base_samples}
    out: dict[str, dict[str, Any]] = {}
    for task in sorted({s["task"] for s in spec_samples}):
        pairs = [(s, base.get((task, s["doc_id"]))) for s in spec_samples if s["task"] == task]
        missing = [s["doc_id"] for s, b in pairs if b is None]
        pairs = [(s, b) for s, b in pairs if b is not None]
        mismatched = [s["doc_id"] for s, b in pairs if s.get("prompt_hash") != b.get("prompt_hash")]
        divergent = []
        for s, b in pairs:
            pos = first_divergence(list(s["output_token_ids"]), list(b["output_token_ids"]))
            if pos is not None:
                divergent.append({"doc_id": s["doc_id"], "position": pos, "spec": _score(s), "baseline": _score(b)})
        filters = _filters(pairs[0][0]) if pairs else [MCNEMAR_FILTER]
        key = f"correct[{MCNEMAR_FILTER if MCNEMAR_FILTER in filters or not filters else filters[0]}]"
        b_only = sum(bool(b[key]) and not bool(s[key]) for s, b in pairs)
        s_only = sum(bool(s[key]) and not bool(b[key]) for s, b in pairs)
        n, d = len(pairs), len(divergent)
        if mismatched or missing or n == 0:
            verdict, why = "FAIL", f"not comparable: {len(missing)} unpaired, {len(mismatched)} different prompts"
        elif d == 0:
            verdict, why = "PASS", "every output identical to the baseline"
        elif dtype in EXACT_DTYPES:
            verdict, why = "FAIL", f"{d} of {n} outputs differ from the baseline in {dtype} (any divergence fails)"
        elif tolerance is None:
            verdict, why = "UNCALIBRATED", f"{d} of {n} differ; no calibrated lossless_tolerance for {dtype}"
        else:
            ok = d / n <= tolerance
            verdict = "PASS" if ok else "FAIL"
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
            "verdict": verdict,
            "reason": why,
        }
    return out
