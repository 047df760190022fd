"""Speculative-decoding acceptance as a server reports it, scraped before and after a run (a draining source also polled
during it: `ServerAcceptance.polling`), as the run's delta in our layout (`AcceptanceStats.to_dict()`) plus "source"
(which endpoint and names were read) and "scope" ("run": a delta over this run; "server_lifetime": the server gives only
an average since it started). Which server exports what, and how each defines acceptance: `server.metric_formats`. The
delta is the fallback: where responses carry per-request counts (`server.response_acceptance`), `ResponseTally` sums
those instead, and "basis" says which a figure came from."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import httpx

from ...workers.spec.metrics import AcceptanceStats, run_acceptance
from .metric_formats import Counters, parse_metrics_response
from .response_acceptance import acceptance_fields, response_acceptance

NOT_REPORTED = "not reported by this server"
POLL_EVERY_S = 1.0  # TensorRT-LLM keeps 1000 iterations: many seconds of decoding even on a fast GPU
# The fallback "basis" (the spec metrics name the first choice, PER_REQUEST): where the responses carry no counts,
# the server-wide counters before and after, which mix in any other traffic on the server.
SERVER_DELTA = "server-wide counter delta (fallback: the responses carry no per-request counts)"


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
    # Never an acceptance length from counters no drafter gives: the totals only (per-position series of a scrape
    # taken mid-step may lag the totals by a step), and K only where the server or the user said it (not estimated)
    known_k = positions or declared_k or 0
    problem = AcceptanceStats(known_k, stats.num_cycles, stats.num_draft_tokens, stats.num_accepted).totals_problem()
    if problem is not None:
        return _layout(d.source, "run", max_draft_len=k, note="; ".join([*notes, f"impossible counters: {problem}"]))
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
        self._client: httpx.Client | None = None  # one for every scrape: one TLS context, kept-alive connections
        self._lock = threading.Lock()

    @property
    def source(self) -> str:
        return f"{self._before.source} at {self._path}" if self._before and self._path else NOT_REPORTED

    def start(self) -> None:
        self._drained = None
        self._before = self.checkpoint()

    def checkpoint(self) -> Counters | None:
        """The server's counters now, cumulative (for a draining source: the sum of its reads since start)."""
        with self._lock:  # the poller and the run's own reads share one client and one sum
            return self._checkpoint()

    def _checkpoint(self) -> Counters | None:
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
            result["basis"] = SERVER_DELTA
        return result

    @property
    def drains(self) -> bool:
        return self._drained is not None

    @contextmanager
    def polling(self, every_s: float = POLL_EVERY_S) -> Iterator[None]:
        """While the block runs, a draining source (TensorRT-LLM's JSON iteration stats, a bounded queue that evicts
        its oldest entries silently) is read every `every_s` seconds, so every iteration is summed before it can be
        evicted. Other sources keep their counts: nothing is polled."""
        if not self.drains:
            yield
            return
        stop = threading.Event()

        def poll() -> None:
            while not stop.wait(every_s):
                self.checkpoint()

        thread = threading.Thread(target=poll, name="acceptance-poll", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    def snapshot(self) -> Counters | None:
        paths = (self._path,) if self._path else self.PATHS
        for path in paths:
            counters = self._read(path)
            if counters is not None:
                self._path = path
                return counters
        return None

    def _read(self, path: str) -> Counters | None:
        if self._client is None:
            self._client = httpx.Client(
                headers=self.headers, timeout=self.timeout_s, verify=self.verify, follow_redirects=True
            )
        try:
            response = self._client.get(self.base_url + path)
        except httpx.HTTPError:
            return None
        if response.status_code != 200:
            return None
        return parse_metrics_response(response.text, self.model)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


def _add(a: Counters, b: Counters) -> Counters:
    return Counters(
        source=a.source,
        cycles=(a.cycles or 0.0) + (b.cycles or 0.0),
        draft_tokens=(a.draft_tokens or 0.0) + (b.draft_tokens or 0.0),
        accepted=(a.accepted or 0.0) + (b.accepted or 0.0),
    )


class ResponseTally:
    """Acceptance from per-response fields (vLLM's `metrics.speculative_decoding`, SGLang's `meta_info`, our serve's;
    `server.response_acceptance`), summed over a run's responses; `result()` is None when no response
    carried them."""

    def __init__(self, max_draft_len: int | None = None) -> None:
        self.max_draft_len = max_draft_len
        self._responses: list[dict[str, Any]] = []

    def add(self, response: Mapping[str, Any]) -> None:
        self._responses.append(acceptance_fields(response))

    def result(self, max_draft_len: int | None = None) -> dict[str, Any] | None:
        k = max_draft_len or self.max_draft_len
        found = [a for a in (response_acceptance(r, k) for r in self._responses) if a is not None]
        if not found:
            return None
        out = run_acceptance(found, k or 0)
        return {**out, "scope": "run", "num_requests": len(found)}
