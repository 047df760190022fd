"""`serve` writes every engine event to its log as an event line (serve/event_lines.py, format in workers/events.py),
which the log reader's table for our engine reads back; and a server whose engine leaks KV blocks shows it in its
own metrics (the `vllm:kv_cache_usage_perc` gauge stays above idle after drain, a `specdec_kv_block_leak` counter),
which the endpoint engine turns into a `kv_leak` event."""

from __future__ import annotations

import io

from specdec_eval.peers.client.config import EndpointConfig
from specdec_eval.peers.client.engine import EndpointEngine
from specdec_eval.peers.server.log import LOG_FORMATS, LogMatcher
from specdec_eval.serve.event_lines import EventLines
from specdec_eval.workers.config import SamplingParams, SpecConfig
from specdec_eval.workers.events import EVENT_LINE_PREFIX, EventLog

from ..prompts import RAW_PROMPTS
from ..serve_helpers import metric_values, serving, tiny_engine, wait_until


def test_each_event_is_written_once_on_one_line():
    log, out = EventLog(rank=0), io.StringIO()
    lines = EventLines(out)
    log.emit("warmup_oom", phase="general", num_tokens=64, num_gen_tokens=0, error="a\nb")
    assert lines.write_new(log.events) == 1
    log.emit("request_failed", request_id=3, reason="boom")
    assert lines.write_new(log.events) == 1 and lines.write_new(log.events) == 0
    written = out.getvalue().splitlines()
    assert len(written) == 2 and all(line.startswith(EVENT_LINE_PREFIX) for line in written)
    matcher = LogMatcher(LOG_FORMATS["specdec-eval"])
    read = [matcher.feed(line, n) for n, line in enumerate(written, 1)]
    assert [(e["type"], e["line"]) for e in read] == [("warmup_oom", 1), ("request_failed", 2)]
    assert read[0]["error"] == "a\nb" and read[1]["reason"] == "boom"


def test_the_server_writes_its_warmup_events_to_its_log(tiny, capsys):
    """A guarded engine whose warmup ran out of memory: the server's log holds the warmup_oom and spec_state_restored
    lines as soon as its engine loop starts, before any request."""
    engine = tiny_engine(tiny, spec=SpecConfig(max_draft_len=3), warmup="on", inject=("warmup_oom",))
    err: list[str] = []

    def logged() -> bool:
        err.append(capsys.readouterr().err)
        return "spec_state_restored" in "".join(err)

    with serving(engine):
        wait_until(logged, what="the warmup's event lines")
    matcher = LogMatcher(LOG_FORMATS["specdec-eval"])
    read = [matcher.feed(line, n) for n, line in enumerate("".join(err).splitlines(), 1)]
    assert {e["type"] for e in read if e is not None} == {"warmup_oom", "spec_state_restored", "fault_injected"}


def test_a_leaking_server_shows_it_in_its_metrics_and_the_client_names_it(tiny):
    """Our serve with the planted KV leak: its KV usage stays above idle after every request finished; the endpoint
    engine reads that as a failing `kv_leak` event. The same server without the bug: none."""
    params = SamplingParams(max_new_tokens=24, ignore_eos=True)
    for inject, leaks in ((("rewind_leaks_blocks",), True), ((), False)):
        engine = tiny_engine(tiny, kv="v2", spec=SpecConfig(max_draft_len=3), inject=inject)
        with serving(engine) as server:
            client = EndpointEngine(
                EndpointConfig(url=server.url, spec="eagle3", max_draft_len=3, concurrency=2, kv_drain_timeout_s=2.0),
                tokenizer=tiny[1],
            )
            assert client.identity.server["kv_usage_source"] == "vllm:kv_cache_usage_perc at /metrics"
            client.generate(RAW_PROMPTS[:4], params)
            values = metric_values(server.url)
            events = client.collect_events()
            client.close()
        assert (values["vllm:kv_cache_usage_perc"] > 0) is leaks
        assert (values["specdec_kv_block_leak_total"] >= 1) is leaks
        found = [e for e in events if e["type"] == "kv_leak"]
        assert bool(found) is leaks, events
        if leaks:
            assert found[0]["idle_used"] == 0 and found[0]["used"] > 0
            assert "KV usage stayed at" in found[0]["message"]
