"""The acceptance metrics of inference servers, read into one shape (`Counters`): which numbers each server exports,
how it defines them, and how they become ours (`server.metrics` turns them into a run's delta).

Ours: a draft cycle is one target step that carried drafts; AL = 1 + accepted drafts / cycles (bonus included);
acceptance rate = accepted drafts / drafted tokens; per-position rate i = cycles whose draft i was accepted / cycles.
How each server defines its numbers, and how they become ours:

- vLLM, Prometheus text on /metrics: counters `vllm:spec_decode_num_drafts` (cycles), `..._num_draft_tokens`,
  `..._num_accepted_tokens` (accepted drafts, bonus excluded) and `..._num_accepted_tokens_per_pos{position}`. Its
  mean acceptance length is 1 + accepted / drafts: ours exactly, so the counters map one to one. Our own
  `specdec-eval serve` exports the same names. Series are summed over labels (engine, ...) except position, and
  restricted to the served model when they carry a model_name label.
- TensorRT-LLM, Prometheus text (/prometheus/metrics, or /metrics): `trtllm_spec_decode_num_draft_tokens_total`
  and `..._num_accepted_tokens_total` (summed from its iteration stats; accepted excludes the bonus) and, per
  request, `..._drafted_tokens_total{token_position}` / `..._accepted_tokens_total{token_position}`. It has no cycle
  counter: cycles = drafted tokens at position 0 (every cycle drafts position 0), or, without per-position
  counters, draft tokens / K for a chain of the declared K (the dict says so in "note").
- TensorRT-LLM, JSON iteration stats on /metrics (trtllm-serve with iteration stats on): a list of the iterations
  since the last read, each with `specDecodingStats` {numDraftTokens, numAcceptedTokens,
  numRequestsWithDraftTokens, acceptanceLength}. Its acceptanceLength is (accepted + requests with drafts) /
  requests with drafts, i.e. ours with cycles = numRequestsWithDraftTokens. Reading drains the list, so the
  scrape before the run only empties it, and the source is polled during the run (the server keeps a bounded queue
  of 1000 iterations and evicts the oldest silently), so every iteration of the run is summed once.
- SGLang, JSON on /server_info (older: /get_server_info): `avg_spec_accept_length` (top level or per data-parallel
  rank in `internal_states`) = accepted tokens incl. the bonus / verify steps, i.e. our AL, but averaged over the
  server's life without the counts, so no delta can be formed: scope "server_lifetime" unless the server had not
  decoded before the run. Per response, `meta_info.spec_verify_ct` (verify steps) with `completion_tokens` gives
  AL = (completion_tokens - 1) / spec_verify_ct (the first token comes from prefill, not from a verify step;
  SGLang's own tests divide completion_tokens by spec_verify_ct, which counts that token too): `ResponseTally`
  in `server.metrics`.
- llama.cpp's own C++ server (`llama-server --metrics`): `llamacpp:spec_decode_num_drafts_total` (verify steps),
  `..._num_draft_tokens_total`, `..._num_accepted_tokens_total`: the vLLM shape, no per-position counters.
- llama-cpp-python's server exports none of these: "not reported by this server".
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

# Prometheus names (without the `_total` suffix) per exporter: cycles, draft tokens, accepted drafts, and the
# per-position (accepted, drafted) counters with their label.
_PROMETHEUS_FORMATS = (
    {
        "name": "vllm",
        "cycles": ("vllm:spec_decode_num_drafts",),
        "draft_tokens": ("vllm:spec_decode_num_draft_tokens",),
        "accepted": ("vllm:spec_decode_num_accepted_tokens",),
        "accepted_per_pos": ("vllm:spec_decode_num_accepted_tokens_per_pos",),
        "drafted_per_pos": (),
        "position_label": "position",
    },
    {
        "name": "trtllm",
        # Dynamo re-exports TensorRT-LLM's metrics with a `trtllm:` prefix.
        "cycles": (),
        "draft_tokens": ("trtllm_spec_decode_num_draft_tokens", "trtllm:spec_decode_num_draft_tokens"),
        "accepted": ("trtllm_spec_decode_num_accepted_tokens", "trtllm:spec_decode_num_accepted_tokens"),
        "accepted_per_pos": ("trtllm_spec_decode_accepted_tokens", "trtllm:spec_decode_accepted_tokens"),
        "drafted_per_pos": ("trtllm_spec_decode_drafted_tokens", "trtllm:spec_decode_drafted_tokens"),
        "position_label": "token_position",
    },
    {
        "name": "llamacpp",
        "cycles": ("llamacpp:spec_decode_num_drafts",),
        "draft_tokens": ("llamacpp:spec_decode_num_draft_tokens",),
        "accepted": ("llamacpp:spec_decode_num_accepted_tokens",),
        "accepted_per_pos": (),
        "drafted_per_pos": (),
        "position_label": "position",
    },
)
_MODEL_LABELS = ("model_name", "model")


@dataclass
class Counters:
    """Cumulative acceptance numbers as one server reports them; None where it reports no such number."""

    source: str  # e.g. "vllm names on /metrics"
    cycles: float | None = None
    draft_tokens: float | None = None
    accepted: float | None = None  # accepted drafts, bonus excluded
    accepted_per_pos: dict[int, float] = field(default_factory=dict)
    drafted_per_pos: dict[int, float] = field(default_factory=dict)
    average_length: float | None = None  # a server-lifetime AL without counts (SGLang)
    drains: bool = False  # every read returns only what happened since the previous read (TRT-LLM JSON)


# ------------------------------------------------------------------------------------------------ parsers


def parse_prometheus(text: str, model: str | None = None) -> Counters | None:
    """Spec-decode counters from a Prometheus text exposition, for the first known exporter whose names appear;
    None when none does. `model`: keep only series whose model label names it (when the label exists)."""
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name = sample.name
            if name.endswith("_created"):  # prometheus_client's creation timestamps, not counts
                continue
            samples.setdefault(name.removesuffix("_total"), []).append((dict(sample.labels), float(sample.value)))
    for fmt in _PROMETHEUS_FORMATS:
        names = fmt["cycles"] + fmt["draft_tokens"] + fmt["accepted"] + fmt["accepted_per_pos"]
        if not any(n in samples for n in names):
            continue
        series = {key: _select(samples, fmt[key], model) for key in ("cycles", "draft_tokens", "accepted")}
        label = fmt["position_label"]
        return Counters(
            source=f"{fmt['name']} names (Prometheus)",
            cycles=_sum(series["cycles"]),
            draft_tokens=_sum(series["draft_tokens"]),
            accepted=_sum(series["accepted"]),
            accepted_per_pos=_by_position(_select(samples, fmt["accepted_per_pos"], model), label),
            drafted_per_pos=_by_position(_select(samples, fmt["drafted_per_pos"], model), label),
        )
    return None


def _select(samples, names: tuple[str, ...], model: str | None) -> list[tuple[dict[str, str], float]] | None:
    for name in names:
        if name in samples:
            rows = samples[name]
            if model is not None:
                rows = [r for r in rows if all(r[0].get(k, model) == model for k in _MODEL_LABELS)]
            return rows
    return None


def _sum(rows) -> float | None:
    return None if rows is None else sum(v for _, v in rows)


def _by_position(rows, label: str) -> dict[int, float]:
    out: dict[int, float] = {}
    for labels, value in rows or []:
        try:
            pos = int(labels[label])
        except (KeyError, ValueError):
            continue
        out[pos] = out.get(pos, 0.0) + value
    return out


def parse_trtllm_iteration_stats(data: Any) -> Counters | None:
    """TensorRT-LLM's JSON iteration stats (a list of per-iteration dicts); None when it is not such a list."""
    if not isinstance(data, list) or not all(isinstance(it, dict) for it in data):
        return None
    out = Counters(
        source="trtllm iteration stats (JSON specDecodingStats)", cycles=0, draft_tokens=0, accepted=0, drains=True
    )
    for it in data:
        spec = it.get("specDecodingStats") or {}
        out.cycles += float(spec.get("numRequestsWithDraftTokens", 0))
        out.draft_tokens += float(spec.get("numDraftTokens", 0))
        out.accepted += float(spec.get("numAcceptedTokens", 0))
    return out


def parse_sglang_server_info(data: Any) -> Counters | None:
    """SGLang's server info: avg_spec_accept_length, top level or per DP rank (their mean); None without it."""
    if not isinstance(data, dict):
        return None
    states = data.get("internal_states") if isinstance(data.get("internal_states"), list) else []
    values = [s.get("avg_spec_accept_length") for s in states if isinstance(s, dict)]
    values = [float(v) for v in values if isinstance(v, int | float)]
    if not values and isinstance(data.get("avg_spec_accept_length"), int | float):
        values = [float(data["avg_spec_accept_length"])]
    if not values:
        return None
    return Counters(source="sglang avg_spec_accept_length (JSON server info)", average_length=sum(values) / len(values))


def parse_metrics_response(text: str, model: str | None = None) -> Counters | None:
    """Any of the known formats, told apart by content: JSON (TRT-LLM iteration stats, SGLang server info) or
    Prometheus text."""
    stripped = text.lstrip()
    if stripped.startswith(("[", "{")):
        try:
            data = json.loads(stripped)
        except ValueError:
            return None
        return parse_trtllm_iteration_stats(data) or parse_sglang_server_info(data)
    try:
        return parse_prometheus(text, model)
    except ValueError:  # not Prometheus text (an HTML page, say)
        return None
