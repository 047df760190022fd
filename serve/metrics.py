"""The server's Prometheus metrics, through prometheus_client with a registry of its own per app (never the global
one, so two servers in one process do not share counts).

Spec-decode counters carry vLLM's names (`vllm:spec_decode_num_drafts`, `..._num_draft_tokens`,
`..._num_accepted_tokens`, `..._num_accepted_tokens_per_pos{position}`), so any client that reads vLLM reads us
(our endpoint client does). prometheus_client exposes a counter named `x` as the samples `x_total`
and `x_created`, the same exposition vLLM's own counters have. The engine's counters are cumulative over its life;
`sync` adds what they gained since the last call, so the exported counters always equal the engine's own."""

from __future__ import annotations

from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from ..event_types import KV_BLOCK_LEAK, REQUEST_FAILED, SPEC_STATE_LEAK, SPEC_STATE_RESTORED, WARMUP_OOM
from ..workers.events import count_events
from ..workers.interface import GenerationOutput, ServingEngine

# Our events, exported as counters `specdec_<type>` (`specdec_<type>_total` in the exposition).
EVENT_COUNTERS = (WARMUP_OOM, SPEC_STATE_RESTORED, SPEC_STATE_LEAK, REQUEST_FAILED, KV_BLOCK_LEAK)
# vLLM's spec-decode counters: our AcceptanceStats key, vLLM's name, what it counts.
SPEC_COUNTERS = (
    ("num_cycles", "vllm:spec_decode_num_drafts", "Draft cycles (target steps that verified drafts)."),
    ("num_draft_tokens", "vllm:spec_decode_num_draft_tokens", "Draft tokens proposed."),
    ("num_accepted_drafts", "vllm:spec_decode_num_accepted_tokens", "Draft tokens accepted (bonus excluded)."),
)
# OpenAI's finish reasons, and vLLM's names for the others.
FINISHED_REASONS = {"eos": "stop", "stop": "stop", "length": "length", "aborted": "abort", "error": "error"}


class ServerMetrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self, model_name: str, spec_decoding: bool) -> None:
        """spec_decoding False: no spec-decode series at all, so a client reads "not reported", not zeros."""
        self.registry = CollectorRegistry(auto_describe=True)
        self.model_name = model_name
        r, m = self.registry, ["model_name"]
        self.spec = (
            {key: Counter(name, doc, m, registry=r) for key, name, doc in SPEC_COUNTERS} if spec_decoding else {}
        )
        self.accepted_per_pos = (
            Counter(
                "vllm:spec_decode_num_accepted_tokens_per_pos",
                "Draft cycles whose draft at this position was accepted.",
                ["model_name", "position"],
                registry=r,
            )
            if spec_decoding
            else None
        )
        self.prompt_tokens = Counter("vllm:prompt_tokens", "Prompt tokens of admitted requests.", m, registry=r)
        self.generation_tokens = Counter("vllm:generation_tokens", "Tokens generated.", m, registry=r)
        self.request_success = Counter(
            "vllm:request_success",
            "Requests finished, by finish reason.",
            ["model_name", "finished_reason"],
            registry=r,
        )
        self.e2e_latency = Histogram(
            "vllm:e2e_request_latency_seconds",
            "Request latency in the engine.",
            m,
            registry=r,
            buckets=(0.1, 0.3, 1, 3, 10, 30, 100, 300, 1000),
        )
        self.kv_usage = Gauge("vllm:kv_cache_usage_perc", "Fraction of KV blocks in use (1 = full).", m, registry=r)
        self.kv_blocks = Gauge("specdec_kv_blocks", "KV blocks in the pool (all replicas).", registry=r)
        self.kv_free_blocks = Gauge("specdec_kv_free_blocks", "Free KV blocks (all replicas).", registry=r)
        self.live_requests = Gauge(
            "specdec_live_requests", "Requests the engine holds (running or waiting).", registry=r
        )
        self.in_flight = Gauge(
            "specdec_requests_in_flight", "Requests the server holds, queued ones included.", registry=r
        )
        self.events = {t: Counter(f"specdec_{t}", f"Engine events of type {t}.", registry=r) for t in EVENT_COUNTERS}
        self._seen_acceptance: dict[str, Any] | None = None
        self._seen_events: dict[str, int] = {}

    # --- called from the engine loop ----------------------------------------------------------------

    def request_added(self, num_prompt_tokens: int) -> None:
        self.prompt_tokens.labels(self.model_name).inc(num_prompt_tokens)

    def tokens_generated(self, n: int) -> None:
        if n:
            self.generation_tokens.labels(self.model_name).inc(n)

    def request_finished(self, finish_reason: str, output: GenerationOutput | None = None) -> None:
        reason = FINISHED_REASONS.get(finish_reason, finish_reason)
        self.request_success.labels(self.model_name, reason).inc()
        if output is not None and "latency_s" in output.stats:
            self.e2e_latency.labels(self.model_name).observe(output.stats["latency_s"])

    def sync(self, engine: ServingEngine, in_flight: int, events: list[dict[str, Any]] | None = None) -> None:
        """Bring the engine-side metrics up to date (acceptance counters, events, KV usage). `events`: the engine's
        events when the caller has just collected them."""
        self._sync_acceptance(engine.reported_acceptance())
        # Counted by type, not by position: a torchrun engine may merge a late rank's older event in before
        # events already seen.
        counts = count_events(engine.collect_events() if events is None else events)
        for type_, counter in self.events.items():
            counter.inc(counts.get(type_, 0) - self._seen_events.get(type_, 0))
        self._seen_events = counts
        kv = engine.kv_usage()
        total, free = kv["num_blocks"], kv["free_blocks"]
        self.kv_blocks.set(total)
        self.kv_free_blocks.set(free)
        self.kv_usage.labels(self.model_name).set(1.0 - free / total if total else 0.0)
        self.live_requests.set(kv["live_requests"])
        self.in_flight.set(in_flight)

    def _sync_acceptance(self, now: dict[str, Any] | None) -> None:
        if now is None or self.accepted_per_pos is None:
            return
        before = self._seen_acceptance or {"accepted_per_position": [0] * now["max_draft_len"]}
        m = self.model_name
        for key, counter in self.spec.items():
            counter.labels(m).inc(now[key] - before.get(key, 0))
        for pos, (n, seen) in enumerate(
            zip(now["accepted_per_position"], before["accepted_per_position"], strict=True)
        ):
            self.accepted_per_pos.labels(m, str(pos)).inc(n - seen)
        self._seen_acceptance = now

    # --- called from /metrics -----------------------------------------------------------------------

    def render(self) -> bytes:
        return generate_latest(self.registry)
