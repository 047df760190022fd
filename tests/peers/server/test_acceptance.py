"""Acceptance per request, read from each server's responses (peers/server/response_acceptance.py): vLLM's
per-request `metrics.speculative_decoding`, SGLang's `meta_info`, our own serve (vLLM's shape, equal to the engine's
counters); the TensorRT-LLM JSON source polled during a run so its bounded queue evicts nothing unread."""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from specdec_eval.evals.gates.acceptance_gate import acceptance_slack
from specdec_eval.peers.client.config import EndpointConfig
from specdec_eval.peers.client.engine import EndpointEngine
from specdec_eval.peers.server.metrics import SERVER_DELTA, ResponseTally, ServerAcceptance
from specdec_eval.peers.server.response_acceptance import response_acceptance
from specdec_eval.serve.responses import speculative_decoding
from specdec_eval.workers.config import SamplingParams, SpecConfig
from specdec_eval.workers.interface import GenerationOutput
from specdec_eval.workers.spec.metrics import PER_REQUEST, AcceptanceStats

from ...serve_helpers import MODEL, StubServer, serving, tiny_engine

# ------------------------------------------------------------------------------ recorded responses, per server


def vllm_answer(steps: int, accepted: int, histogram: list[int], k: int = 3, tokens: int = 50) -> dict:
    """A /v1/completions answer of vLLM with `--per-request-spec-decode-metrics summary` (vLLM PR #48915)."""
    return {
        "id": "cmpl-9",
        "object": "text_completion",
        "model": "m",
        "choices": [{"index": 0, "text": " 42", "finish_reason": "stop", "stop_reason": None}],
        "usage": {"prompt_tokens": 11, "completion_tokens": tokens, "total_tokens": 11 + tokens},
        "metrics": {
            "speculative_decoding": {
                "mean_acceptance_length": 1 + accepted / steps,
                "draft_acceptance_rate": accepted / (steps * k),
                "acceptance_histogram": histogram,
                "num_spec_steps": steps,
                "num_accepted_draft_tokens": accepted,
                "num_draft_tokens": steps * k,
                "num_spec_tokens": k,
            }
        },
    }


def test_vllm_per_request_fields():
    # The example of the PR: 43 verify steps; 39 accepted nothing, 1 accepted one draft, 3 accepted all three.
    got = response_acceptance(vllm_answer(43, 10, [39, 1, 0, 3]))
    assert (got["num_cycles"], got["num_draft_tokens"], got["num_accepted_drafts"]) == (43, 129, 10)
    assert got["acceptance_length"] == round(1 + 10 / 43, 4)  # vLLM's mean_acceptance_length: ours, bonus included
    assert got["accepted_per_position"] == [4, 3, 3]  # steps that accepted draft i: the histogram's tail sums
    assert sum(got["accepted_per_position"]) == got["num_accepted_drafts"]
    assert got["max_draft_len"] == 3 and got["source"].startswith("vllm per-request")
    # no histogram: counts without positions (never zeros that claim a position was never accepted)
    bare = vllm_answer(43, 10, [39, 1, 0, 3])
    del bare["metrics"]["speculative_decoding"]["acceptance_histogram"]
    assert response_acceptance(bare)["accepted_per_position"] == []
    # a plain vLLM answer, and llama.cpp's, carry none
    plain = vllm_answer(1, 0, [1])
    del plain["metrics"]
    assert response_acceptance(plain) is None


def test_sglang_meta_info():
    # /generate: meta_info at the top level. 1 prefill token + 8 verify steps that emitted 20 tokens: 12 accepted.
    top = {"text": "x", "meta_info": {"completion_tokens": 21, "spec_verify_ct": 8, "prompt_tokens": 9}}
    got = response_acceptance(top, declared_k=3)
    assert (got["num_cycles"], got["num_accepted_drafts"], got["num_draft_tokens"]) == (8, 12, 24)
    assert got["acceptance_length"] == 2.5 and got["accepted_per_position"] == []
    assert "declared K 3" in got["note"]  # the draft tokens are an assumption, and the record says so
    # per choice, with newer SGLang's own accepted / drafted counts (read in preference to the derivation)
    choice = {
        "choices": [
            {
                "text": "y",
                "meta_info": {
                    "completion_tokens": 21,
                    "spec_verify_ct": 8,
                    "spec_accept_token_num": 11,
                    "spec_draft_token_num": 32,
                },
            }
        ]
    }
    got = response_acceptance(choice, declared_k=3)
    assert (got["num_cycles"], got["num_accepted_drafts"], got["num_draft_tokens"]) == (8, 11, 32)
    # a request that never verified (one token) has no acceptance to report
    assert response_acceptance({"meta_info": {"completion_tokens": 1, "spec_verify_ct": 0}}) is None


def test_run_acceptance_and_slack_come_from_the_requests():
    # Each histogram agrees with its totals (steps = its sum, accepted = sum of j x entry j): one that did not
    # (20 steps, 30 accepted, [2, 3, 5, 10] saying 43) now gives no per-position counts at all.
    answers = [vllm_answer(43, 10, [39, 1, 0, 3]), vllm_answer(20, 30, [4, 6, 6, 4]), vllm_answer(5, 0, [5, 0, 0, 0])]
    tally = ResponseTally(3)
    for a in answers:
        tally.add(a)
    run = tally.result()
    assert run["basis"] == PER_REQUEST and run["num_requests"] == 3
    assert (run["num_cycles"], run["num_accepted_drafts"]) == (68, 40)
    assert run["acceptance_length"] == round(1 + 40 / 68, 4)  # the ratio of sums, not the mean of per-request ALs
    assert run["accepted_per_position"] == [4 + 16 + 0, 3 + 10 + 0, 3 + 4 + 0]
    # the gate's sampling slack is the ratio estimator over these requests
    slack = acceptance_slack([(43, 10), (20, 30), (5, 0)])
    assert 0 < slack < 2 and slack != acceptance_slack([(43, 10), (20, 30)])


def test_endpoint_keeps_each_requests_counts_and_labels_the_fallback(tiny):
    counts = {"a": (43, 10, [39, 1, 0, 3]), "b": (20, 30, [4, 6, 6, 4])}

    def answer(body):
        return 200, vllm_answer(*counts[body["prompt"]])

    with StubServer(answer) as server:
        engine = EndpointEngine(EndpointConfig(url=server.url, spec="eagle3", max_draft_len=3), tokenizer=tiny[1])
        out = engine.generate(["a", "b"], SamplingParams(max_new_tokens=8))
        reported = engine.reported_acceptance()
    assert [o.stats["acceptance"]["num_cycles"] for o in out] == [43, 20]
    assert [o.stats["acceptance"]["accepted_per_position"] for o in out] == [[4, 3, 3], [16, 10, 4]]
    assert engine.last_stats.acceptance["basis"] == PER_REQUEST
    assert reported["num_accepted_drafts"] == 40 and "server_wide" not in reported  # the stub has no /metrics

    # A server whose answers carry nothing: the server-wide delta is the fallback, labelled as such.
    metrics = {"n": 0}

    def plain(body):
        metrics["n"] += 1
        return 200, {"choices": [{"index": 0, "text": "4", "finish_reason": "stop"}]}

    with _StubWithMetrics(plain, metrics) as server:
        engine = EndpointEngine(EndpointConfig(url=server.url, spec="eagle3", max_draft_len=3), tokenizer=tiny[1])
        out = engine.generate(["a", "b"], SamplingParams(max_new_tokens=8))
    assert all("acceptance" not in o.stats for o in out)
    assert engine.last_stats.acceptance["basis"] == SERVER_DELTA
    assert engine.last_stats.acceptance["num_cycles"] == 2  # one vLLM draft step per request, from /metrics


class _StubWithMetrics(StubServer):
    """The stub plus vLLM's Prometheus counters on /metrics: one draft step of 3 drafts, 1 accepted, per POST."""

    def __init__(self, answer, metrics):
        super().__init__(answer)
        handler = self.httpd.RequestHandlerClass
        get = handler.do_GET

        def do_get(self):  # noqa: N802
            if self.path != "/metrics":
                return get(self)
            n = metrics["n"]
            raw = (
                f"vllm:spec_decode_num_drafts_total {n}\nvllm:spec_decode_num_draft_tokens_total {3 * n}\n"
                f"vllm:spec_decode_num_accepted_tokens_total {n}\n"
            ).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        handler.do_GET = do_get


# ------------------------------------------------------------------------ TensorRT-LLM: drained, polled


class _TrtllmIterations:
    """trtllm-serve's /metrics with iteration stats: a bounded queue (1000 entries, the oldest evicted silently),
    drained on each read. `produce(n)` appends n iterations of one draft step (3 drafts, 2 accepted) each."""

    def __init__(self, maxlen: int = 1000):
        self.queue: deque = deque(maxlen=maxlen)
        self.lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                with owner.lock:
                    body = json.dumps(list(owner.queue)).encode()
                    owner.queue.clear()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()

    def produce(self, n: int) -> None:
        stats = {"numDraftTokens": 3, "numAcceptedTokens": 2, "numRequestsWithDraftTokens": 1, "acceptanceLength": 3}
        with self.lock:
            self.queue.extend({"iter": i, "specDecodingStats": stats} for i in range(n))

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.mark.parametrize("polled", [True, False])
def test_trtllm_drained_json_is_polled_during_the_run(polled):
    server = _TrtllmIterations()
    server.produce(700)  # the server's past: drained by the first read, never counted
    try:
        scraper = ServerAcceptance(server.url)
        scraper.start()
        assert scraper.drains
        with scraper.polling(every_s=0.02) if polled else _nothing():
            for _ in range(10):  # a run of 10 x 400 iterations: 4x what the queue holds
                server.produce(400)
                time.sleep(0.25)
        delta = scraper.delta()
    finally:
        server.close()
    if polled:
        assert (delta["num_cycles"], delta["num_draft_tokens"], delta["num_accepted_drafts"]) == (4000, 12000, 8000)
        assert delta["acceptance_length"] == 3.0 and delta["basis"] == SERVER_DELTA
    else:  # read only before and after: the queue kept its last 1000 iterations
        assert delta["num_cycles"] == 1000


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return None


# ------------------------------------------------------------------- our serve: the engine's own counters


def test_serve_answers_in_vllms_shape():
    counts = AcceptanceStats(3, 10, 30, 12, [6, 4, 2]).to_dict()
    spec = speculative_decoding([GenerationOutput(0, [1], [2], "x", "eos", {"acceptance": counts})])
    assert spec["acceptance_histogram"] == [4, 2, 2, 2] and spec["num_spec_steps"] == 10
    assert response_acceptance({"metrics": {"speculative_decoding": spec}})["accepted_per_position"] == [6, 4, 2]
    assert speculative_decoding([GenerationOutput(0, [1], [2], "x", "eos", {})]) is None


@pytest.fixture(scope="module")
def ngram_pair(tiny):
    spec = {"spec": SpecConfig(algorithm="ngram", max_draft_len=3)}
    return tiny_engine(tiny, **spec), tiny_engine(tiny, **spec)


REPEATING = [
    "one two three one two three one two",
    "a b a b a b a",
    "the cat sat on the mat. the cat sat on",
    "1, 2, 3, 1, 2, 3, 1,",
]


def test_serve_per_request_counts_equal_the_engines(tiny, ngram_pair):
    engine, offline = ngram_pair
    params = SamplingParams(max_new_tokens=24, ignore_eos=True)
    want = offline.generate(REPEATING, params)
    with serving(engine) as server:
        scraper = ServerAcceptance(server.url, model=MODEL)
        scraper.start()
        client = EndpointEngine(
            EndpointConfig(url=server.url + "/v1", spec="ngram", max_draft_len=3, concurrency=2), tokenizer=tiny[1]
        )
        got = client.generate(REPEATING, params)
        delta, run = scraper.delta(), client.last_stats.acceptance
    assert [o.token_ids for o in got] == [o.token_ids for o in want]
    keys = ("num_cycles", "num_draft_tokens", "num_accepted_drafts", "accepted_per_position", "acceptance_length")
    for g, w in zip(got, want, strict=True):  # each request's counts, through HTTP, are the engine's own
        assert {k: g.stats["acceptance"][k] for k in keys} == {k: w.stats["acceptance"][k] for k in keys}
    assert sum(w.stats["acceptance"]["num_accepted_drafts"] for w in want) > 0  # drafts were accepted
    # the run-level figure from the per-request counts is the server's counter delta
    assert run["basis"] == PER_REQUEST and {k: run[k] for k in keys} == {k: delta[k] for k in keys}


@pytest.mark.slow  # two servers and a whole run (lm-eval's pipeline): ~20 s on an idle 2-core machine
def test_endpoint_run_stores_counts_per_sample_and_reports_them(tiny, ngram_pair, tmp_path, capsys):
    """`run --endpoint` on our serve: each sample keeps its request's counts, the task's AL is their ratio of sums
    and equals the server's counter delta, the report draws AL by output length, and compare pairs them."""
    from specdec_eval.results import store
    from specdec_eval.results.compare import compare_runs
    from specdec_eval.results.report import build_report

    from ...cli_helpers import run_cli

    engine, _ = ngram_pair
    plain = tiny_engine(tiny)
    out = tmp_path / "runs"
    args = (
        "--spec",
        "ngram",
        "--draft-len",
        "3",
        "--model",
        "tiny",
        "--tasks",
        "gsm8k_smoke",
        "--limit",
        "4",
        "--max-output-len",
        "24",
        "--no-reference",
        "--out",
        str(out),
        "--fresh",
        "--json",
    )
    with serving(engine) as spec_server, serving(plain) as plain_server:
        code, stdout, err = run_cli(
            capsys, "run", "--endpoint", spec_server.url, "--baseline-endpoint", plain_server.url, *args
        )
    assert code == 0, err
    summary = json.loads(stdout)
    task = summary["tasks"]["gsm8k_smoke"]["acceptance"]
    assert task["basis"] == PER_REQUEST and task["source"].startswith("vllm per-request")
    server = summary["reported_acceptance"]["server_wide"]  # the /metrics delta over the same run
    keys = ("num_cycles", "num_draft_tokens", "num_accepted_drafts", "accepted_per_position", "acceptance_length")
    assert {k: task[k] for k in keys} == {k: server[k] for k in keys}
    run = store.Run(Path(summary["run_dir"]))
    samples = list(run.samples())
    assert sum(s.acceptance["num_cycles"] for s in samples) == task["num_cycles"]
    assert all(
        s.acceptance_length == round(1 + s.acceptance["num_accepted_drafts"] / s.acceptance["num_cycles"], 4)
        for s in samples
    )
    html, _ = build_report([run])
    assert 'alt="#1 acceptance by output length"' in html and "per-request counts (vllm" in html
    paired = compare_runs(run, run)["tasks"]["gsm8k_smoke"]["acceptance"]["per_document"]
    assert paired["n"] == len(samples) and paired["relative"] == 0 and paired["weighted"]


def test_compare_labels_a_server_wide_fallback():
    from specdec_eval.results.compare import _acceptance, _acceptance_lines, _with_fallback
    from specdec_eval.results.run_summary import RunSummary, TaskSummary

    server = {"acceptance_length": 1.8, "basis": SERVER_DELTA, "num_cycles": 10}
    run = RunSummary.from_json({"verdict": "PASS", "tasks": {}, "reported_acceptance": server})
    task = _with_fallback(TaskSummary.from_json({"acceptance": None}), run)
    assert dict(task.acceptance) == server  # the run's only figure, kept with its label
    per_request = {"acceptance_length": 2.0, "basis": PER_REQUEST}
    assert dict(_with_fallback(TaskSummary.from_json({"acceptance": per_request}), run).acceptance) == per_request
    acc = _acceptance([], per_request, server, {"drop": 0.05, "alpha": 0.05, "beta": 0.2})
    assert acc["per_document"] is None and acc["basis"] == {"a": PER_REQUEST, "b": SERVER_DELTA}
    assert any(line.startswith("  acceptance of B: server-wide") for line in _acceptance_lines(acc))
