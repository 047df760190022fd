"""The server under load: continuous batching across HTTP requests, clients that go away mid-request (their KV
blocks come back), the bounded queue, the API key, engine failures as 500s, and the spec-decode counters of
/metrics read by our scraper (peers/server/metrics.py `ServerAcceptance`) against the engine's own."""

from __future__ import annotations

import asyncio
import hmac

import httpx
import pytest
from specdec_eval.peers.server.metrics import ServerAcceptance
from specdec_eval.serve.bench import bench_prompts, completion_body, time_concurrent, time_sequential
from specdec_eval.workers.config import SamplingParams, SpecConfig

from ..serve_helpers import MODEL, joined, kv_returned, metric_values, serving, sse_events, tiny_engine, wait_until


def test_32_concurrent_requests_take_well_under_32_times_one(tiny):
    engine, offline = tiny_engine(tiny), tiny_engine(tiny)
    prompts = bench_prompts(32)
    want = [o.token_ids for o in offline.generate(prompts, SamplingParams(max_new_tokens=16, ignore_eos=True))]
    bodies = [completion_body(p, 16, MODEL) for p in prompts]
    with serving(engine) as server:
        time_sequential(server.url, bodies[:1])  # connection and first-call costs
        one_s = min(time_sequential(server.url, bodies[:1])[0] for _ in range(2))
        all_s, answers = time_concurrent(server.url, bodies)
    assert [a["choices"][0]["token_ids"] for a in answers] == want
    # Sequentially 32 requests take 32x one; batched across requests they share steps (about 3x here).
    assert all_s < 10 * one_s, (all_s, one_s)


def test_64_clients_some_going_away_mid_request(tiny):
    engine, offline = tiny_engine(tiny), tiny_engine(tiny)
    prompts = bench_prompts(64)
    want = offline.generate(prompts, SamplingParams(max_new_tokens=12))
    results: dict[int, object] = {}

    async def client(i: int, http: httpx.AsyncClient) -> None:
        body = {"model": MODEL, "prompt": prompts[i], "temperature": 0}
        if i % 4 == 0:  # streams a long answer and hangs up after its second chunk
            async with http.stream(
                "POST", "/v1/completions", json={**body, "max_tokens": 1500, "ignore_eos": True, "stream": True}
            ) as r:
                seen = 0
                async for line in r.aiter_lines():
                    seen += bool(line)
                    if seen == 2:
                        break
            results[i] = "left"
        elif i % 4 == 1:  # waits for a long non-streamed answer, then gives up
            try:
                await http.post("/v1/completions", json={**body, "max_tokens": 1500, "ignore_eos": True}, timeout=0.5)
                results[i] = "finished?!"
            except httpx.TimeoutException:
                results[i] = "left"
        elif i % 4 == 2:
            async with http.stream("POST", "/v1/completions", json={**body, "max_tokens": 12, "stream": True}) as r:
                results[i] = joined(sse_events([line async for line in r.aiter_lines()]))
        else:
            results[i] = (await http.post("/v1/completions", json={**body, "max_tokens": 12})).json()["choices"][0]

    async def everyone(url: str) -> None:
        limits = httpx.Limits(max_connections=64, max_keepalive_connections=0)
        async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as http:
            await asyncio.gather(*(client(i, http) for i in range(64)))

    with serving(engine) as server:
        asyncio.run(everyone(server.url))
        wait_until(lambda: kv_returned(server.url), what="every KV block back")
        assert httpx.get(server.url + "/health").json() == {"status": "ok"}
        again = httpx.post(
            server.url + "/v1/completions", json={"prompt": prompts[3], "max_tokens": 12, "temperature": 0}, timeout=60
        )
        assert again.json()["choices"][0]["token_ids"] == want[3].token_ids
        assert metric_values(server.url)["vllm:request_success_total"] == 64 + 1
    for i, got in results.items():
        if i % 4 < 2:
            assert got == "left"
        else:
            assert (got["text"], got["token_ids"]) == (want[i].text, want[i].token_ids), i
    usage = engine.kv_usage()
    assert usage["free_blocks"] == usage["num_blocks"] and usage["live_requests"] == 0


def test_a_full_queue_answers_503_with_retry_after(tiny):
    with serving(tiny_engine(tiny), max_queue=1) as server, httpx.Client(base_url=server.url, timeout=60) as c:
        with c.stream(
            "POST",
            "/v1/completions",
            json={"prompt": "hi", "max_tokens": 1500, "ignore_eos": True, "stream": True, "temperature": 0},
        ) as long:
            lines = long.iter_lines()  # kept open (a closed iterator closes the connection, which aborts)
            assert next(lines).startswith("data: ")
            refused = httpx.post(server.url + "/v1/completions", json={"prompt": "hi"}, timeout=60)
            assert metric_values(server.url)["specdec_live_requests"] == 1
        assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
        assert refused.json()["error"]["code"] == "unavailable"
        wait_until(lambda: kv_returned(server.url), what="the long request aborted")
        assert c.post("/v1/completions", json={"prompt": "hi", "max_tokens": 2}).status_code == 200


def test_more_prompts_than_the_queue_holds_is_a_400_our_client_never_retries(tiny):
    """A 503 says "try again later"; a request that can never fit says why, and our client (lm-eval's retry policy,
    peers/client/requests.py) gives up at once instead of retrying what cannot succeed."""
    import requests
    from specdec_eval.peers.client.requests import call_with_retries

    with serving(tiny_engine(tiny), max_queue=2) as server:
        sent = []

        def send():
            sent.append(1)
            r = requests.post(server.url + "/v1/completions", json={"prompt": ["a", "b", "c"], "max_tokens": 1})
            r.raise_for_status()
            return r.json()

        answer = call_with_retries(send, max_retries=3, on_retry=lambda *a: None)
        two = httpx.post(server.url + "/v1/completions", json={"prompt": ["a", "b"], "max_tokens": 1}, timeout=60)
    assert len(sent) == 1 and answer.attempts == 1 and answer.response is None
    assert answer.error == (
        "HTTP 400 Bad Request: this request has 3 prompts, more than the server holds at once "
        "(--max-queue 2); send at most 2 per request"
    )
    assert two.status_code == 200 and len(two.json()["choices"]) == 2


def test_new_requests_get_503_while_the_server_drains(tiny):
    """After SIGTERM the server keeps listening until its in-flight requests are done: a new request gets a 503
    (not a refused connection) and /health says so, while the streamed answer in flight completes."""
    with serving(tiny_engine(tiny), grace_s=60) as server, httpx.Client(base_url=server.url, timeout=60) as c:
        body = {"prompt": "hi", "max_tokens": 300, "ignore_eos": True, "stream": True, "temperature": 0}
        with c.stream("POST", "/v1/completions", json=body) as long:
            lines = long.iter_lines()
            first = next(lines)
            server.begin_stop()  # what SIGTERM does
            refused = httpx.post(server.url + "/v1/completions", json={"prompt": "hi", "max_tokens": 2}, timeout=60)
            health = httpx.get(server.url + "/health", timeout=60)
            rest = list(lines)
        server.stop()
    assert refused.status_code == 503 and refused.json()["error"]["message"] == "the server is shutting down"
    assert refused.headers["retry-after"] and health.status_code == 503
    events = sse_events([first, *rest])
    assert events[-1] == "[DONE]" and events[-2]["choices"][0]["finish_reason"] == "length"
    assert sum(len(e["choices"][0]["token_ids"]) for e in events[:-1]) == 300
    with pytest.raises(httpx.ConnectError):  # drained: it no longer listens
        httpx.get(server.url + "/health", timeout=5)


def test_a_second_signal_ends_the_drain_at_once(tiny):
    with serving(tiny_engine(tiny), grace_s=600) as server, httpx.Client(base_url=server.url, timeout=60) as c:
        body = {"prompt": "hi", "max_tokens": 1500, "ignore_eos": True, "stream": True, "temperature": 0}
        with c.stream("POST", "/v1/completions", json=body) as long:
            lines = long.iter_lines()
            first = next(lines)
            server.begin_stop()
            server.begin_stop()  # a second SIGTERM / Ctrl-C: the request in flight is ended now, not in 600 s
            rest = list(lines)
    events = sse_events([first, *rest])
    assert events[-1] == "[DONE]" and events[-2]["error"]["code"] == "unavailable"


def test_the_api_key_is_required_and_compared_in_constant_time(tiny, monkeypatch):
    compared = []
    real = hmac.compare_digest
    monkeypatch.setattr(hmac, "compare_digest", lambda a, b: compared.append(1) or real(a, b))
    with serving(tiny_engine(tiny), api_key="s3cret") as server:
        body = {"prompt": "hi", "max_tokens": 2}
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
            r = httpx.post(server.url + "/v1/completions", json=body, headers=headers, timeout=60)
            assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
        assert httpx.get(server.url + "/v1/models").status_code == 401
        good = {"Authorization": "Bearer s3cret"}
        assert httpx.post(server.url + "/v1/completions", json=body, headers=good, timeout=60).status_code == 200
        assert httpx.get(server.url + "/health").status_code == 200  # probes and scrapes need no key, as vLLM's
        assert httpx.get(server.url + "/metrics").status_code == 200
    assert len(compared) == 5


def test_an_engine_failure_is_a_500_never_an_answer(tiny):
    engine = tiny_engine(tiny, inject=("target_forward@0",), max_retries=0)
    with serving(engine) as server, httpx.Client(base_url=server.url, timeout=60) as c:
        failed = c.post("/v1/completions", json={"prompt": "hi", "max_tokens": 4})
        assert failed.status_code == 500 and failed.json()["error"]["type"] == "engine_error"
        assert c.post("/v1/completions", json={"prompt": "hi", "max_tokens": 4}).status_code == 200
        m = metric_values(server.url)
        assert m["specdec_request_failed_total"] == 1 and m["specdec_spec_state_leak_total"] == 0


def test_acceptance_scraped_from_metrics_equals_the_engine_counters(tiny):
    engine = tiny_engine(tiny, spec=SpecConfig(max_draft_len=3))
    with serving(engine) as server:
        scraper = ServerAcceptance(server.url, model=MODEL)
        scraper.start()
        time_concurrent(server.url, [completion_body(p, 20, MODEL) for p in bench_prompts(6)])
        delta = scraper.delta()
    own = engine.reported_acceptance()  # the server has stopped: its engine thread is gone
    assert own["num_cycles"] > 0 and own["num_accepted_drafts"] > 0
    keys = ("num_cycles", "num_draft_tokens", "num_accepted_drafts", "accepted_per_position", "acceptance_length")
    assert {k: delta[k] for k in keys} == {k: own[k] for k in keys}
    assert delta["source"] == "vllm names (Prometheus) at /metrics" and delta["scope"] == "run"
