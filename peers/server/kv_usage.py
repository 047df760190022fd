"""A server's KV-cache usage, read from the metrics it exports, and the check that it returns to its idle value once
a run has drained (else a `kv_leak` event: blocks that never went back to the pool, which no other gate sees while
the pool lasts).

Which gauge, as a fraction of the pool in use (cached blocks that can be reused count as free in each), is each
engine profile's `kv_gauges` (`profiles`); TensorRT-LLM's JSON iteration stats are read here by content: the last
iteration's `kvCacheStats` (usedNumBlocks / maxNumBlocks). Those drain on every read, so they are read here only
when the acceptance scraper does not read them (`server.metrics`), and an idle server has no iteration to report:
the check then cannot judge (said, never a PASS)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from ..profiles import PROFILES

# Each exporter's gauges once (our serve's profile shares vLLM's), in profile order.
# The engines whose KV usage comes in JSON (each tells its own shape apart), in profile order.
_JSON_READERS = tuple(p.read_json_kv_usage for p in PROFILES.values() if p.read_json_kv_usage is not None)
KV_GAUGES = tuple(dict.fromkeys(p.kv_gauges for p in PROFILES.values() if p.kv_gauges))
_MODEL_LABELS = ("model_name", "model")
DRAIN_TIMEOUT_S = 10.0  # a server frees a finished request's blocks within its next steps
TOLERANCE = 1e-6


@dataclass(frozen=True)
class KVUsage:
    source: str  # e.g. "vllm:kv_cache_usage_perc at /metrics"
    used: float  # fraction of the pool in use, 0..1 (the largest over the server's engines)


def parse_kv_usage(text: str, model: str | None = None, read_json: bool = True) -> tuple[str, float] | None:
    """(gauge name, used fraction) from a metrics response, or None when it holds no known KV gauge."""
    stripped = text.lstrip()
    if stripped.startswith(("[", "{")):
        if not read_json:
            return None
        try:
            data = json.loads(stripped)
        except ValueError:
            return None
        return next((found for read in _JSON_READERS if (found := read(data)) is not None), None)
    try:
        families = list(text_string_to_metric_families(text))
    except ValueError:  # not Prometheus text
        return None
    values: dict[str, list[float]] = {}
    for family in families:
        for sample in family.samples:
            if model is not None and any(sample.labels.get(k, model) != model for k in _MODEL_LABELS):
                continue
            values.setdefault(sample.name, []).append(float(sample.value))
    for names in KV_GAUGES:
        for name in names:
            if values.get(name):
                return name, max(values[name])
    return None


class ServerKVUsage:
    """Reads one server's KV usage; `read()` is None when it exports none (or `read_json` is off and it has only
    TensorRT-LLM's draining JSON)."""

    PATHS = ("/metrics", "/prometheus/metrics")

    def __init__(
        self,
        base_url: str,
        headers: Mapping[str, str] | None = None,
        model: str | None = None,
        verify: bool = True,
        read_json: bool = True,
        timeout_s: float = 10.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.headers = dict(headers or {})
        self.model = model
        self.verify = verify
        self.read_json = read_json
        self.timeout_s = timeout_s
        self._path: str | None = None

    def read(self) -> KVUsage | None:
        with httpx.Client(
            headers=self.headers, timeout=self.timeout_s, verify=self.verify, follow_redirects=True
        ) as client:
            for path in (self._path,) if self._path else self.PATHS:
                try:
                    response = client.get(self.base_url + path)
                except httpx.HTTPError:
                    continue
                found = (
                    parse_kv_usage(response.text, self.model, self.read_json) if response.status_code == 200 else None
                )
                if found is not None:
                    self._path = path
                    return KVUsage(f"{found[0]} at {path}", found[1])
        return None


def check_drained(
    read: Callable[[], KVUsage | None],
    idle: KVUsage,
    timeout_s: float = DRAIN_TIMEOUT_S,
    poll_s: float = 0.25,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Any] | None:
    """After a run drained: None once the usage is back at `idle` (within `timeout_s`), else the fields of a
    `kv_leak` event (idle and final usage, the gauge read, how long it was given)."""
    start = clock()
    last = None
    while True:
        now = read()
        if now is not None:
            last = now
            if now.used <= idle.used + TOLERANCE:
                return None
        if clock() - start >= timeout_s:
            break
        sleep(poll_s)
    if last is None:
        return None  # the gauge went away: nothing to judge
    return {
        "idle_used": round(idle.used, 6),
        "used": round(last.used, 6),
        "gauge": last.source,
        "waited_s": round(clock() - start, 2),
        "message": f"KV usage stayed at {last.used:.2%} after the run drained (idle: {idle.used:.2%}; "
        f"{last.source}, waited {clock() - start:.1f} s)",
    }
