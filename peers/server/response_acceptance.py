"""Speculative-decoding acceptance of one request, read from that request's own response, in our layout
(`AcceptanceStats.to_dict()`) plus "source". Per-request counts are what make a run's AL
immune to other traffic on the server, and what the paired per-request AL test and the AL-by-length plot need.

The shapes read (lm-eval's backend keeps the raw response JSON, so nothing is lost between the server and here):

- vLLM (`--per-request-spec-decode-metrics summary|detailed`) and our own `specdec-eval serve`: a top-level
  `metrics.speculative_decoding` object with `num_spec_steps` (verify steps that carried drafts: our cycles),
  `num_draft_tokens`, `num_accepted_draft_tokens` (bonus excluded), `num_spec_tokens` (K) and
  `acceptance_histogram` (entry j: steps that accepted exactly j drafts). Its mean_acceptance_length is
  1 + accepted / steps, ours exactly. A chain accepts a prefix, so the steps that accepted draft i are those that
  accepted more than i drafts: the per-position counts are the histogram's tail sums.
- SGLang: `meta_info` (top level of /generate, or per choice) with `spec_verify_ct` (verify steps) and
  `completion_tokens`. The first output token comes from prefill, not from a verify step, so accepted drafts =
  completion_tokens - 1 - spec_verify_ct (SGLang's own AL figure, completion_tokens / spec_verify_ct, counts that
  token too). Newer SGLang adds `spec_accept_token_num` / `spec_draft_token_num`, read when present; without them
  the draft tokens are verify steps x the declared K (a chain of K drafts per step), and the dict says so.

Counts no drafter can produce (more accepted than drafted, more than K accepted per step:
`AcceptanceStats.totals_problem`) raise `ImpossibleAcceptance`: the endpoint records that request as failed with
the reason, so they never become an acceptance length, a gate's evidence or a populated reference. A histogram that
contradicts the totals gives no per-position counts (which of the two is right cannot be told).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...workers.spec.metrics import AcceptanceStats

VLLM_SOURCE = "vllm per-request metrics.speculative_decoding"
SGLANG_SOURCE = "sglang per-request meta_info.spec_verify_ct"


class ImpossibleAcceptance(ValueError):
    """A response's acceptance counts that no speculative decoder could have produced; the message says which."""


def response_acceptance(response: Any, declared_k: int | None = None) -> dict[str, Any] | None:
    """The acceptance one response reports, or None when it carries none (a plain server, llama.cpp). Raises
    ImpossibleAcceptance for counts beyond what K allows."""
    if not isinstance(response, Mapping):
        return None
    metrics = response.get("metrics")
    spec = metrics.get("speculative_decoding") if isinstance(metrics, Mapping) else None
    if isinstance(spec, Mapping):
        found = _from_vllm(spec, declared_k)
        if found is not None:
            return found
    for meta in _meta_infos(response):
        found = _from_sglang(meta, declared_k)
        if found is not None:
            return found
    return None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _from_vllm(spec: Mapping[str, Any], declared_k: int | None) -> dict[str, Any] | None:
    steps, drafted, accepted = (
        _int(spec.get(k)) for k in ("num_spec_steps", "num_draft_tokens", "num_accepted_draft_tokens")
    )
    if steps is None or drafted is None or accepted is None:
        return None
    histogram = spec.get("acceptance_histogram")
    if not isinstance(histogram, list) or any(_int(h) is None for h in histogram):
        histogram = None
    k = _int(spec.get("num_spec_tokens")) or (len(histogram) - 1 if histogram else None) or declared_k or 0
    per_position, missing = None, "the response has no acceptance histogram"
    if histogram and len(histogram) <= k + 1 and sum(histogram) == steps:
        per_position = [sum(histogram[i + 1 :]) for i in range(k)]
    stats = _possible(AcceptanceStats(k, steps, drafted, accepted, per_position or [0] * k), VLLM_SOURCE)
    if per_position is not None and stats.per_position_problem() is not None:  # which of the two is right: unknown
        missing = f"its acceptance histogram contradicts its totals ({stats.per_position_problem()})"
        per_position, stats = None, AcceptanceStats(k, steps, drafted, accepted)
    out = {**stats.to_dict(), "source": VLLM_SOURCE}
    if per_position is None:  # zeros would claim no position was ever accepted
        out["per_position_rate"], out["accepted_per_position"] = [], []
        out["note"] += f"; {missing}"
    return out


def _from_sglang(meta: Mapping[str, Any], declared_k: int | None) -> dict[str, Any] | None:
    verify, tokens = _int(meta.get("spec_verify_ct")), _int(meta.get("completion_tokens"))
    if not verify or tokens is None:
        return None
    accepted = _int(meta.get("spec_accept_token_num"))
    drafted = _int(meta.get("spec_draft_token_num"))
    notes = []
    if accepted is None:
        accepted = max(0, tokens - 1 - verify)
        notes.append("accepted = completion_tokens - 1 - spec_verify_ct")
    k = declared_k or 0
    if drafted is None:
        drafted = verify * k
        notes.append(f"draft tokens = verify steps x declared K {k}")
    stats = _possible(AcceptanceStats(k, verify, drafted, accepted), SGLANG_SOURCE)
    out = {**stats.to_dict(), "source": SGLANG_SOURCE}
    out["per_position_rate"], out["accepted_per_position"] = [], []  # SGLang reports no per-position counts
    out["note"] += "; " + "; ".join([*notes, "no per-position counts"])
    return out


def _possible(stats: AcceptanceStats, source: str) -> AcceptanceStats:
    problem = stats.totals_problem()
    if problem is not None:
        raise ImpossibleAcceptance(f"impossible acceptance counts in the answer ({source}): {problem}")
    return stats


def _meta_infos(response: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    found = [response.get("meta_info")]
    choices = response.get("choices")
    for choice in choices if isinstance(choices, list) else []:
        if isinstance(choice, Mapping):
            found.append(choice.get("meta_info"))
    return [m for m in found if isinstance(m, Mapping)]


def acceptance_fields(response: Any) -> dict[str, Any]:
    """What of a response `response_acceptance` reads (a response's text is not kept to tally a run)."""
    if not isinstance(response, Mapping):
        return {}
    choices = response.get("choices")
    metas = (
        [{"meta_info": c.get("meta_info")} for c in choices if isinstance(c, Mapping)]
        if isinstance(choices, list)
        else []
    )
    return {"metrics": response.get("metrics"), "meta_info": response.get("meta_info"), "choices": metas}
