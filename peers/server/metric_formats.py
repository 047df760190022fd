"""The acceptance metrics of inference servers, read into one shape (`Counters`): which numbers each server exports,
how it defines them, and how they become ours (`server.metrics` turns them into a run's delta).

Ours: a draft cycle is one target step that carried drafts; AL = 1 + accepted drafts / cycles (bonus included);
acceptance rate = accepted drafts / drafted tokens; per-position rate i = cycles whose draft i was accepted / cycles.
Which numbers each server exports, and how they become ours, is said in its profile (`profiles`): the
Prometheus names there (`PrometheusNames`), and here the two JSON shapes read by content: TensorRT-LLM's iteration
stats (a list of the iterations since the last read, each with `specDecodingStats` {numDraftTokens,
numAcceptedTokens, numRequestsWithDraftTokens, acceptanceLength}; its acceptanceLength is (accepted + requests with
drafts) / requests with drafts, i.e. ours with cycles = numRequestsWithDraftTokens; reading drains the list, so the
scrape before the run only empties it, and the source is polled during the run: the server keeps a bounded queue of
1000 iterations and evicts the oldest silently) and SGLang's server info (`avg_spec_accept_length`, top level or per
data-parallel rank: a server-lifetime AL without the counts, so no delta can be formed: scope "server_lifetime"
unless the server had not decoded before the run; per response, `ResponseTally` in `server.metrics`).
Prometheus series are summed over labels (engine, ...) except position, and restricted to the served model when
they carry a model_name label. A server that exports none of them: "not reported by this server".
"""

from __future__ import annotations

import json

from prometheus_client.parser import text_string_to_metric_families

from ..profiles import PROFILES, PrometheusNames
from ..profiles.counters import Counters


def _prometheus_formats() -> tuple[PrometheusNames, ...]:
    """Each exporter's names once (our serve's profile shares vLLM's)."""
    found = [p.prometheus for p in PROFILES.values() if p.prometheus is not None]
    return tuple({names.exporter: names for names in found}.values())


_PROMETHEUS_FORMATS = _prometheus_formats()
# The engines whose metrics come as JSON (each tells its own shape apart), in profile order.
_JSON_READERS = tuple(p.read_json_metrics for p in PROFILES.values() if p.read_json_metrics is not None)
_MODEL_LABELS = ("model_name", "model")


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
        if not any(n in samples for n in fmt.counted):
            continue
        label = fmt.position_label
        return Counters(
            source=f"{fmt.exporter} names (Prometheus)",
            cycles=_sum(_select(samples, fmt.cycles, model)),
            draft_tokens=_sum(_select(samples, fmt.draft_tokens, model)),
            accepted=_sum(_select(samples, fmt.accepted, model)),
            accepted_per_pos=_by_position(_select(samples, fmt.accepted_per_pos, model), label),
            drafted_per_pos=_by_position(_select(samples, fmt.drafted_per_pos, model), label),
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


def parse_metrics_response(text: str, model: str | None = None) -> Counters | None:
    """Any of the known formats, told apart by content: JSON (each profile's `read_json_metrics`: TRT-LLM's iteration
    stats, SGLang's server info) or Prometheus text."""
    stripped = text.lstrip()
    if stripped.startswith(("[", "{")):
        try:
            data = json.loads(stripped)
        except ValueError:
            return None
        for read in _JSON_READERS:
            found = read(data)
            if found is not None:
                return found
        return None
    try:
        return parse_prometheus(text, model)
    except ValueError:  # not Prometheus text (an HTML page, say)
        return None


__all__ = ["Counters", "parse_metrics_response", "parse_prometheus"]
