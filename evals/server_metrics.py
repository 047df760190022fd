"""Speculative-decoding acceptance as a server reports it, scraped before and after a run, as the run's delta in our
layout (`AcceptanceStats.to_dict()`, workers/spec/metrics.py) plus "source" (which endpoint and names were read)
and "scope" ("run": a delta over this run; "server_lifetime": the server gives only an average since it started).

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
  scrape before the run only empties it and the scrape after sums the run's iterations (the server keeps a bounded
  number of iterations: a very long run can lose the oldest).
- SGLang, JSON on /server_info (older: /get_server_info): `avg_spec_accept_length` (top level or per data-parallel
  rank in `internal_states`) = accepted tokens incl. the bonus / verify steps, i.e. our AL, but averaged over the
  server's life without the counts, so no delta can be formed: scope "server_lifetime" unless the server had not
  decoded before the run. Per response, `meta_info.spec_verify_ct` (verify steps) with `completion_tokens` gives
  AL = (completion_tokens - 1) / spec_verify_ct (the first token comes from prefill, not from a verify step;
  SGLang's own tests divide completion_tokens by spec_verify_ct, which counts that token too): see `ResponseTally`.
- llama.cpp's own C++ server (`llama-server --metrics`): `llamacpp:spec_decode_num_drafts_total` (verify steps),
  `..._num_draft_tokens_total`, `..._num_accepted_tokens_total`: the vLLM shape, no per-position counters.
- llama-cpp-python's server exports none of these: "not reported by this server".
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from ..workers.spec.metrics import AcceptanceStats

NOT_REPORTED = "not reported by this server"

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


# ------------------------------------------------------------------------------------------- the delta


def acceptance_delta(before: Counters | None, after: Counters | None, max_draft_len: int | None = None):
    """The run's acceptance in our layout plus "source" and "scope"; None when the server reports none.

    `before` None means the first scrape found no series: Prometheus counters that a server creates at their first
    increment were then zero. `max_draft_len`: the K the user declared, used only where the server does not tell."""
    if after is None:
        return None
    if after.average_length is not None:
        fresh = before is None or not before.average_length
        return _layout(
            after.source,
            "run" if fresh else "server_lifetime",
            average_length=after.average_length,
            max_draft_len=max_draft_len or 0,
        )
    if before is None:
        d = after
    else:
        d = _subtract(after, before)
        if d is None:
            return _layout(
                after.source,
                "run",
                max_draft_len=max_draft_len or 0,
                note="counters went backwards during the run (server restarted?); acceptance unknown",
            )
    return _from_counts(d, max_draft_len)


def _subtract(after: Counters, before: Counters) -> Counters | None:
    def minus(a, b):
        return None if a is None else a - (b or 0.0)

    d = Counters(
        source=after.source,
        cycles=minus(after.cycles, before.cycles),
        draft_tokens=minus(after.draft_tokens, before.draft_tokens),
        accepted=minus(after.accepted, before.accepted),
        accepted_per_pos={p: v - before.accepted_per_pos.get(p, 0.0) for p, v in after.accepted_per_pos.items()},
        drafted_per_pos={p: v - before.drafted_per_pos.get(p, 0.0) for p, v in after.drafted_per_pos.items()},
    )
    values = [d.cycles, d.draft_tokens, d.accepted, *d.accepted_per_pos.values(), *d.drafted_per_pos.values()]
    return None if any(v is not None and v < 0 for v in values) else d


def _from_counts(d: Counters, declared_k: int | None) -> dict[str, Any]:
    notes = []
    cycles = d.cycles
    if cycles is None and 0 in d.drafted_per_pos:
        cycles = d.drafted_per_pos[0]
        notes.append("cycles = drafted tokens at position 0")
    positions = max([*d.accepted_per_pos, *d.drafted_per_pos], default=-1) + 1
    k = positions or declared_k or 0
    if not k and cycles and d.draft_tokens is not None:
        k = round(d.draft_tokens / cycles)
    if cycles is None and d.draft_tokens is not None and declared_k:
        cycles = d.draft_tokens / declared_k
        notes.append(f"cycles estimated as draft tokens / declared K {declared_k} (the server counts no cycles)")
    per_pos = [int(d.accepted_per_pos.get(i, 0)) for i in range(k)] if d.accepted_per_pos else None
    if cycles is None or d.draft_tokens is None or d.accepted is None:
        return _layout(
            d.source,
            "run",
            max_draft_len=k,
            counts=(cycles, d.draft_tokens, d.accepted),
            note="; ".join(notes + ["the server does not report enough counters for an acceptance length"]),
        )
    stats = AcceptanceStats(k, round(cycles), round(d.draft_tokens), round(d.accepted), per_pos or [0] * k)
    out = {**stats.to_dict(), "source": d.source, "scope": "run"}
    if per_pos is None:  # zeros from AcceptanceStats would claim every position was never accepted
        out["per_position_rate"], out["accepted_per_position"] = [], []
        notes.append("the server reports no per-position counters")
    if notes:
        out["note"] = out["note"] + "; " + "; ".join(notes)
    return out


def _layout(
    source: str,
    scope: str,
    *,
    max_draft_len: int,
    average_length: float | None = None,
    counts: tuple = (None, None, None),
    note: str | None = None,
) -> dict[str, Any]:
    """Our keys where the counts are incomplete: unknown numbers are None, never zeros."""
    cycles, drafted, accepted = (None if c is None else round(c) for c in counts)
    out = {
        "acceptance_length": None if average_length is None else round(average_length, 4),
        "acceptance_rate": round(accepted / drafted, 4) if accepted is not None and drafted else None,
        "per_position_rate": [],
        "num_cycles": cycles,
        "num_draft_tokens": drafted,
        "num_accepted_drafts": accepted,
        "accepted_per_position": [],
        "max_draft_len": max_draft_len,
        "note": "acceptance_length includes the bonus token",
        "source": source,
        "scope": scope,
    }
    if note:
        out["note"] += "; " + note
    return out


# ------------------------------------------------------------------------------------------- scraping


class ServerAcceptance:
    """Scrapes one server's acceptance: `start()` before a run, then `delta()` (since start) or `delta_since(mark)`
    (since a `checkpoint()`), any number of times. Probes /metrics, /prometheus/metrics, /server_info and
    /get_server_info until one reports acceptance, then keeps it; `source` names it, or says NOT_REPORTED."""

    PATHS = ("/metrics", "/prometheus/metrics", "/server_info", "/get_server_info")

    def __init__(
        self,
        base_url: str,
        headers: Mapping[str, str] | None = None,
        model: str | None = None,
        max_draft_len: int | None = None,
        timeout_s: float = 30.0,
        verify: bool = True,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.headers = dict(headers or {})
        self.model = model
        self.max_draft_len = max_draft_len
        self.timeout_s = timeout_s
        self.verify = verify
        self._path: str | None = None  # where acceptance was found
        self._before: Counters | None = None
        self._drained: Counters | None = None  # a draining source: the sum of its reads since start

    @property
    def source(self) -> str:
        return f"{self._before.source} at {self._path}" if self._before and self._path else NOT_REPORTED

    def start(self) -> None:
        self._drained = None
        self._before = self.checkpoint()

    def checkpoint(self) -> Counters | None:
        """The server's counters now, cumulative (for a draining source: the sum of its reads since start)."""
        counters = self.snapshot()
        if counters is None or not counters.drains:
            return counters
        # A draining source returns only what happened since its previous read: what the first read returns is
        # the server's past (not counted); later reads add up.
        if self._drained is None:
            self._drained = Counters(counters.source, cycles=0.0, draft_tokens=0.0, accepted=0.0)
        else:
            self._drained = _add(self._drained, counters)
        return replace(self._drained)

    def delta(self) -> dict[str, Any] | None:
        return self.delta_since(self._before)

    def delta_since(self, mark: Counters | None) -> dict[str, Any] | None:
        result = acceptance_delta(mark, self.checkpoint(), self.max_draft_len)
        if result is not None:
            result["source"] = f"{result['source']} at {self._path}"
        return result

    def snapshot(self) -> Counters | None:
        paths = (self._path,) if self._path else self.PATHS
        for path in paths:
            counters = self._read(path)
            if counters is not None:
                self._path = path
                return counters
        return None

    def _read(self, path: str) -> Counters | None:
        try:
            response = httpx.get(
                self.base_url + path,
                headers=self.headers,
                timeout=self.timeout_s,
                verify=self.verify,
                follow_redirects=True,
            )
        except httpx.HTTPError:
            return None
        if response.status_code != 200:
            return None
        return parse_metrics_response(response.text, self.model)


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


def _add(a: Counters, b: Counters) -> Counters:
    return Counters(
        source=a.source,
        cycles=(a.cycles or 0.0) + (b.cycles or 0.0),
        draft_tokens=(a.draft_tokens or 0.0) + (b.draft_tokens or 0.0),
        accepted=(a.accepted or 0.0) + (b.accepted or 0.0),
    )


class ResponseTally:
    """Acceptance from per-response fields (SGLang's `meta_info.spec_verify_ct` + `completion_tokens`), summed
    over a run's responses; `result()` is None when no response carried them."""

    def __init__(self) -> None:
        self.cycles = 0
        self.accepted = 0
        self.seen = False

    def add(self, response: Mapping[str, Any]) -> None:
        for meta in _meta_infos(response):
            verify, tokens = meta.get("spec_verify_ct"), meta.get("completion_tokens")
            if isinstance(verify, int) and isinstance(tokens, int) and verify > 0:
                self.seen = True
                self.cycles += verify
                self.accepted += max(0, tokens - 1 - verify)

    def result(self, max_draft_len: int | None = None) -> dict[str, Any] | None:
        if not self.seen:
            return None
        return _layout(
            "sglang meta_info.spec_verify_ct (per response)",
            "run",
            max_draft_len=max_draft_len or 0,
            average_length=1 + self.accepted / self.cycles,
            counts=(self.cycles, None, self.accepted),
        )


def _meta_infos(response: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    found = [response.get("meta_info")]
    for choice in response.get("choices") or []:
        if isinstance(choice, Mapping):
            found.append(choice.get("meta_info"))
    return [m for m in found if isinstance(m, Mapping)]
