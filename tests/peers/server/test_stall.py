"""A server that stops answering ends the run quickly and says why (peers/server/stall_watch.py, the endpoint
engine's loop): against a fake server that hangs after its Nth request while /health answers 200, the run fails in
about the stall window instead of timeouts x retries x remaining documents, every unanswered document a failed
request, the cause named from the server's log when a signature explains it."""

from __future__ import annotations

import time

import pytest
from specdec_eval.peers.client.config import EndpointConfig
from specdec_eval.peers.client.engine import EndpointEngine
from specdec_eval.peers.server.failure import server_failure_line
from specdec_eval.peers.server.stall_watch import StallPolicy, StallWatch, time_without_watch
from specdec_eval.workers.config import SamplingParams

from specdec_eval.errors import UserError

from ...fake_server_helpers import HangingServer
from .test_log_tables import SEED_LOG

# --- the rule, on a clock of our own ----------------------------------------------------------------------------------


def test_no_answer_past_every_requests_own_limit_is_a_stall():
    watch = StallWatch(StallPolicy(factor=10, floor_s=5), now=0.0, budgets={1: 4, 2: 4})
    assert watch.check(100.0, {0: 0.0}) is None  # no answer yet: no scale (each request's timeout still applies)
    watch.answered(2.0, now=10.0, tokens=4)  # the slowest answer so far: 2 s (0.5 s a token), so 20 s for 4 tokens
    assert watch.limit_s(1) == 20
    assert watch.check(29.9, {1: 9.0}) is None
    assert watch.check(30.1, {1: 9.0, 2: 12.0}) is None  # request 2 began 18.1 s ago: within its limit
    stall = watch.check(32.1, {1: 9.0, 2: 12.0})
    assert stall is not None and "no request was answered for 22.1 s while 2 were in flight" in stall.reason


def test_a_long_output_is_owed_a_long_wait():
    # Seven short answers of 0.2 s, one token each; then a request that may write 256 tokens: 10 x 0.2 s x 256.
    watch = StallWatch(StallPolicy(), now=0.0, budgets={i: 256 for i in range(8)})
    for i in range(7):
        watch.answered(0.2, now=0.2 * (i + 1), tokens=1)
    assert watch.limit_s(7) == pytest.approx(512)
    assert watch.check(1.4 + 75, {7: 1.4}) is None  # a healthy server answering it in 75 s is not failed
    assert watch.check(1.4 + 513, {7: 1.4}) is not None
    assert watch.limit_s(99) == 60  # no budget known: the floor (and 10x the slowest answer)


def test_no_stall_while_other_requests_are_answered():
    watch = StallWatch(StallPolicy(factor=4, floor_s=1), now=0.0, budgets={7: 1, 8: 1})
    for t in (1.0, 2.0, 2.3, 2.6):
        watch.answered(0.5, now=t, tokens=1)
    # request 7 has waited 2.7 s, past 4 x 0.5 s, but the server answered 0.1 s ago: it is working
    assert watch.check(2.7, {7: 0.0, 8: 2.6}) is None
    assert watch.check(4.7, {7: 0.0, 8: 2.6}) is not None  # then nothing for 2.1 s: past both limits


def test_a_fatal_log_line_or_an_exited_server_ends_it_without_waiting_for_the_window():
    watch = StallWatch(StallPolicy(floor_s=600, fatal_grace_s=5), now=0.0)
    assert watch.check(3.0, {0: 0.0}, fatal_seen_at=1.0) is None  # within the grace period
    assert "engine died" in watch.check(6.5, {0: 0.0}, fatal_seen_at=1.0).reason
    watch.answered(0.1, now=7.0)  # an answer after the fatal line: the server still answers (a stale log?)
    assert watch.check(11.0, {1: 7.0}, fatal_seen_at=1.0) is None
    assert watch.check(1.0, {}, exited=-9).reason == "the server process exited with status -9"


def test_the_policy_refuses_nonsense():
    with pytest.raises(UserError, match="factor"):
        StallPolicy(factor=1)
    with pytest.raises(UserError, match="floor"):
        EndpointConfig(url="http://127.0.0.1:1", stall_floor_s=0)


def test_time_without_the_watch():
    # 7 documents, 2 at a time: 4 rounds of (4 attempts x 30 s + backoff 1 + 1 + 2 s)
    assert time_without_watch(30, 3, 7, 2) == 4 * (4 * 30 + 4)


# --- against a server that hangs --------------------------------------------------------------------------------------


STORY = "Natalia sold clips to forty-eight of her friends in April. How many did she sell in May?"
# A server's log line that quotes a prompt (a GPQA question must never reach the disk through an event's raw line).
QUOTING = (
    "[12/05/2026-10:00:09] [TRT-LLM] [E] Encountered an error in sampling: bad input 'sold clips to forty-eight of'"
)


def _run(server: HangingServer, tiny, n: int, **config) -> tuple[EndpointEngine, list, float]:
    config = EndpointConfig(
        url=server.url, concurrency=2, max_retries=3, timeout_s=30, stall_floor_s=1.0, kv_drain_timeout_s=0, **config
    )
    engine = EndpointEngine(config, tokenizer=tiny[1])
    start = time.perf_counter()
    outputs = engine.generate([f"Question {i}: {STORY}" for i in range(n)], SamplingParams(max_new_tokens=4))
    return engine, outputs, time.perf_counter() - start


def test_a_server_that_hangs_after_its_third_answer_fails_the_run_within_the_window(tiny):
    with HangingServer(answer_first=3) as server:
        engine, outputs, took = _run(server, tiny, 10)
        try:
            events = engine.collect_events()
        finally:
            engine.close()
    assert [o.finish_reason for o in outputs].count("error") == 7 and server.hanging >= 1
    without = time_without_watch(30, 3, 7, 2)  # 496 s
    assert 1.0 <= took < 10.0 < without
    (stalled,) = [e for e in events if e["type"] == "server_stalled"]
    assert stalled["unanswered"] == 7 and stalled["health"] == "/health answers 200"
    assert "no request was answered for" in stalled["reason"] and "no server log to read" in stalled["reason"]
    failed = [e for e in events if e["type"] == "request_failed"]
    assert len(failed) == 7
    assert all(e["reason"].startswith("not answered: the server stopped answering") for e in failed)
    assert all(o.error.startswith("not answered") for o in outputs if o.finish_reason == "error")


def test_the_cause_is_named_from_the_servers_log(tiny, tmp_path):
    log = tmp_path / "server.log"
    log.write_text(SEED_LOG + QUOTING + "\n")
    with HangingServer(answer_first=2) as server:
        engine, outputs, took = _run(server, tiny, 6, server_log=str(log), server_log_format="trtllm")
        try:
            events = engine.collect_events()
        finally:
            engine.close()
    (stalled,) = [e for e in events if e["type"] == "server_stalled"]
    assert stalled["cause"] == "executor loop died: Sampling failed, log line 11"
    assert "cause from its log: executor loop died: Sampling failed, log line 11" in stalled["reason"]
    line = server_failure_line(events)  # what `run` prints after its verdict (phase 2)
    assert line.startswith("server: the server stopped answering: ") and line.endswith("(4 documents unanswered)")
    assert took < 10.0 and [o.finish_reason for o in outputs].count("error") == 4
    from_log = [e for e in events if e.get("source") == "server_log"]
    assert [e["type"] for e in from_log] == [
        "warmup_oom",
        "spec_state_leak",
        "forward_error",
        "engine_dead",
        "forward_error",
    ]
    quoting = from_log[-1]  # it quotes the run's prompts: its text is withheld
    assert quoting["line"] == 16 and quoting["raw"].startswith("(line withheld: it quotes a prompt; ")
    assert "forty" not in str(quoting)
    assert engine.identity.server["log_format"] == "trtllm" and engine.identity.server["log_format_from"] == "named"


def test_a_healthy_server_answering_one_request_slowly_is_not_failed(tiny):
    # The story at a 1/50 time scale: seven answers of 0.2 s, then one of 75 s, one at a time, with the default
    # factor and a floor of 60 s scaled alike; GSM8K's 256-token budget. Before budgets counted, the one slow answer
    # was cut at the floor (62 s at full scale).
    scale = 1 / 50
    delays = tuple([0.2 * scale] * 7 + [75 * scale])
    with HangingServer(answer_first=8, delays_s=delays) as server:
        config = EndpointConfig(
            url=server.url, concurrency=1, max_retries=0, timeout_s=30, stall_floor_s=60 * scale, kv_drain_timeout_s=0
        )
        engine = EndpointEngine(config, tokenizer=tiny[1])
        outputs = engine.generate([f"Question {i}: {STORY}" for i in range(8)], SamplingParams(max_new_tokens=256))
        engine.close()
    assert [o.finish_reason for o in outputs].count("error") == 0
    assert not [e for e in engine.collect_events() if e["type"] == "server_stalled"]


def test_a_server_that_answers_is_never_cut_short(tiny):
    with HangingServer(answer_first=100) as server:
        engine, outputs, _ = _run(server, tiny, 6)
        engine.close()
    assert all(o.finish_reason != "error" for o in outputs)
    events = engine.collect_events()
    assert not [e for e in events if e["type"] in ("server_stalled", "request_failed")]
    assert server_failure_line(events) is None


def test_sent_prompts_withhold_a_line_that_quotes_one():
    from specdec_eval.peers.client.requests import SentPrompts

    sent = SentPrompts()
    assert sent.withhold("anything at all") == "anything at all"  # nothing sent yet
    sent.add("Question 3: " + STORY)
    for echo in ("natalia SOLD clips to forty-eight", "...friends in April. How many did she sell..."):
        assert sent.withhold(f"error: {echo}").startswith("(line withheld: it quotes a prompt; ")
    kept = "Encountered an error in forward function: CUDA error: an illegal memory access"
    assert sent.withhold(kept) == kept
