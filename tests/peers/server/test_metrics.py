"""Acceptance scraped from servers (peers/server/metrics.py, peers/server/metric_formats.py). The
metric texts and JSON below are written here in each exporter's documented format (names, labels, fields), not copied
from any server's output."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from specdec_eval.peers.server.metric_formats import parse_metrics_response, parse_prometheus
from specdec_eval.peers.server.metrics import NOT_REPORTED, ResponseTally, ServerAcceptance, acceptance_delta
from specdec_eval.workers.spec.metrics import AcceptanceStats


def vllm_text(drafts, draft_tokens, accepted, per_pos, model="served-a"):
    """Two engines of one model (their series are summed) and a second model that must be left out."""
    lines = [
        "# HELP vllm:spec_decode_num_drafts Number of spec decoding drafts.",
        "# TYPE vllm:spec_decode_num_drafts counter",
        f'vllm:spec_decode_num_drafts_total{{engine="0",model_name="{model}"}} {drafts - 1}',
        f'vllm:spec_decode_num_drafts_total{{engine="1",model_name="{model}"}} 1.0',
        'vllm:spec_decode_num_drafts_total{engine="0",model_name="another"} 777.0',
        f'vllm:spec_decode_num_drafts_created{{engine="0",model_name="{model}"}} 1.7e9',
        "# TYPE vllm:spec_decode_num_draft_tokens counter",
        f'vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="{model}"}} {draft_tokens}',
        "# TYPE vllm:spec_decode_num_accepted_tokens counter",
        f'vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="{model}"}} {accepted}',
        "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter",
    ]
    for pos, n in enumerate(per_pos):
        labels = f'engine="0",model_name="{model}",position="{pos}"'
        lines.append(f"vllm:spec_decode_num_accepted_tokens_per_pos_total{{{labels}}} {n}")
    lines += ["# TYPE vllm:num_requests_running gauge", f'vllm:num_requests_running{{model_name="{model}"}} 3']
    return "\n".join(lines) + "\n"


def test_vllm_counters_delta_is_ours_one_to_one():
    before = parse_prometheus(vllm_text(10, 30, 12, [6, 4, 2]), model="served-a")
    after = parse_prometheus(vllm_text(110, 330, 192, [86, 64, 42]), model="served-a")
    got = acceptance_delta(before, after)
    want = AcceptanceStats(3, 100, 300, 180, [80, 60, 40]).to_dict()
    assert {k: got[k] for k in want} == want
    assert got["acceptance_length"] == 2.8 and got["per_position_rate"] == [0.8, 0.6, 0.4]
    assert got["source"].startswith("vllm") and got["scope"] == "run"


def test_model_filter_and_summing_over_engines():
    c = parse_prometheus(vllm_text(10, 30, 12, [6, 4, 2]), model="served-a")
    assert c.cycles == 10  # 9 + 1 over two engines, the other model's 777 left out
    everything = parse_prometheus(vllm_text(10, 30, 12, [6, 4, 2]))
    assert everything.cycles == 10 + 777


TRTLLM_PROM = """# HELP trtllm_spec_decode_num_draft_tokens_total Total number of draft tokens
# TYPE trtllm_spec_decode_num_draft_tokens_total counter
trtllm_spec_decode_num_draft_tokens_total{{model_name="m",engine_type="trtllm"}} {drafted}
# TYPE trtllm_spec_decode_num_accepted_tokens_total counter
trtllm_spec_decode_num_accepted_tokens_total{{model_name="m",engine_type="trtllm"}} {accepted}
"""
TRTLLM_PER_POS = """# TYPE trtllm_spec_decode_drafted_tokens_total counter
trtllm_spec_decode_drafted_tokens_total{{model_name="m",engine_type="trtllm",token_position="0"}} {d0}
trtllm_spec_decode_drafted_tokens_total{{model_name="m",engine_type="trtllm",token_position="1"}} {d0}
# TYPE trtllm_spec_decode_accepted_tokens_total counter
trtllm_spec_decode_accepted_tokens_total{{model_name="m",engine_type="trtllm",token_position="0"}} {a0}
trtllm_spec_decode_accepted_tokens_total{{model_name="m",engine_type="trtllm",token_position="1"}} {a1}
"""


def test_trtllm_prometheus_cycles_from_position_zero():
    after = parse_prometheus(TRTLLM_PROM.format(drafted=80, accepted=50) + TRTLLM_PER_POS.format(d0=40, a0=30, a1=20))
    got = acceptance_delta(None, after)  # series absent before the run: they had not been incremented yet
    assert (got["num_cycles"], got["num_draft_tokens"], got["num_accepted_drafts"]) == (40, 80, 50)
    assert got["acceptance_length"] == 2.25 and got["accepted_per_position"] == [30, 20]
    assert "position 0" in got["note"] and got["source"].startswith("trtllm")


def test_trtllm_prometheus_without_positions_uses_declared_k_or_says_unknown():
    before = parse_prometheus(TRTLLM_PROM.format(drafted=30, accepted=10))
    after = parse_prometheus(TRTLLM_PROM.format(drafted=330, accepted=190))
    got = acceptance_delta(before, after, max_draft_len=3)
    assert got["num_cycles"] == 100 and got["acceptance_length"] == 2.8
    assert "declared K 3" in got["note"] and got["per_position_rate"] == []
    unknown = acceptance_delta(before, after)
    assert unknown["acceptance_length"] is None and unknown["num_cycles"] is None
    assert unknown["acceptance_rate"] == 0.6 and "not report enough" in unknown["note"]


def test_trtllm_json_iteration_stats_are_summed():
    iterations = [
        {
            "iter": 7,
            "specDecodingStats": {
                "numDraftTokens": 9,
                "numAcceptedTokens": 5,
                "numRequestsWithDraftTokens": 3,
                "acceptanceLength": 8 / 3,
            },
        },
        {"iter": 8, "numActiveRequests": 1},  # a context-only iteration
        {
            "iter": 9,
            "specDecodingStats": {
                "numDraftTokens": 3,
                "numAcceptedTokens": 3,
                "numRequestsWithDraftTokens": 1,
                "acceptanceLength": 4.0,
            },
        },
    ]
    c = parse_metrics_response(json.dumps(iterations))
    assert c.drains and (c.cycles, c.draft_tokens, c.accepted) == (4, 12, 8)
    got = acceptance_delta(parse_metrics_response("[]"), c)
    assert got["acceptance_length"] == 3.0 and got["acceptance_rate"] == round(8 / 12, 4)
    assert got["max_draft_len"] == 3  # 12 draft tokens over 4 cycles


def test_sglang_average_is_lifetime_unless_the_server_was_fresh():
    info = {"version": "x", "internal_states": [{"avg_spec_accept_length": 2.5}, {"avg_spec_accept_length": 3.5}]}
    after = parse_metrics_response(json.dumps(info))
    fresh = acceptance_delta(parse_metrics_response(json.dumps({"internal_states": [{}]})), after)
    assert fresh["acceptance_length"] == 3.0 and fresh["scope"] == "run" and fresh["num_cycles"] is None
    used = acceptance_delta(parse_metrics_response(json.dumps({"avg_spec_accept_length": 2.0})), after)
    assert used["scope"] == "server_lifetime" and used["acceptance_length"] == 3.0


def test_llamacpp_native_names():
    text = (
        "\n".join(
            [
                "# TYPE llamacpp:spec_decode_num_drafts_total counter",
                "llamacpp:spec_decode_num_drafts_total 20",
                "# TYPE llamacpp:spec_decode_num_draft_tokens_total counter",
                "llamacpp:spec_decode_num_draft_tokens_total 160",
                "# TYPE llamacpp:spec_decode_num_accepted_tokens_total counter",
                "llamacpp:spec_decode_num_accepted_tokens_total 30",
            ]
        )
        + "\n"
    )
    got = acceptance_delta(None, parse_prometheus(text))
    assert got["acceptance_length"] == 2.5 and got["max_draft_len"] == 8 and got["accepted_per_position"] == []


def test_counters_that_go_backwards_are_not_a_delta():
    before = parse_prometheus(vllm_text(110, 330, 192, [86, 64, 42]))
    after = parse_prometheus(vllm_text(10, 30, 12, [6, 4, 2]))
    got = acceptance_delta(before, after)
    assert got["acceptance_length"] is None and "backwards" in got["note"]


@pytest.mark.parametrize(
    "body",
    [
        "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 12.5\n",
        "<html><body>Not Found</body></html>",
        '{"detail": "Not Found"}',
        "",
    ],
)
def test_no_spec_names_is_not_reported(body):
    assert parse_metrics_response(body) is None
    assert acceptance_delta(None, parse_metrics_response(body)) is None


def test_response_tally_uses_verify_steps_without_the_prefill_token():
    tally = ResponseTally()
    assert tally.result() is None
    tally.add({"text": "a", "meta_info": {"completion_tokens": 21, "spec_verify_ct": 8}})  # 1 + 8 verifies, 12 acc
    tally.add({"choices": [{"text": "b", "meta_info": {"completion_tokens": 5, "spec_verify_ct": 2}}]})  # 2 acc
    got = tally.result(max_draft_len=3)
    assert got["num_cycles"] == 10 and got["num_accepted_drafts"] == 14 and got["acceptance_length"] == 2.4


# ---------------------------------------------------------------------------------------- over HTTP


class _Server:
    """A local HTTP server answering each path with the next of its bodies (the last one repeats)."""

    def __init__(self, routes: dict[str, list[str]]):
        routes = {path: list(bodies) for path, bodies in routes.items()}
        seen: list[str] = []

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - the stdlib's name
                seen.append(self.path)
                bodies = routes.get(self.path)
                if not bodies:
                    self.send_error(404)
                    return
                body = (bodies.pop(0) if len(bodies) > 1 else bodies[0]).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.seen = seen
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def serve():
    servers = []

    def start(routes):
        servers.append(_Server(routes))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


def test_scraper_finds_trtllm_on_its_prometheus_path(serve):
    first = TRTLLM_PROM.format(drafted=30, accepted=10) + TRTLLM_PER_POS.format(d0=10, a0=6, a1=4)
    second = TRTLLM_PROM.format(drafted=90, accepted=40) + TRTLLM_PER_POS.format(d0=30, a0=20, a1=20)
    server = serve({"/prometheus/metrics": [first, second]})
    scraper = ServerAcceptance(server.url, model="m")
    scraper.start()
    assert scraper.source.endswith("at /prometheus/metrics")
    got = scraper.delta()
    assert (got["num_cycles"], got["num_accepted_drafts"], got["accepted_per_position"]) == (20, 30, [14, 16])
    assert server.seen == ["/metrics", "/prometheus/metrics", "/prometheus/metrics"]  # probed once, then kept


def test_scraper_sums_every_drained_read_since_start(serve):
    it = {"specDecodingStats": {"numDraftTokens": 6, "numAcceptedTokens": 4, "numRequestsWithDraftTokens": 2}}
    server = serve({"/metrics": [json.dumps([it, it]), json.dumps([it]), json.dumps([it, it]), "[]"]})
    scraper = ServerAcceptance(server.url)
    scraper.start()  # drains the two iterations from before the run
    assert scraper.delta()["num_cycles"] == 2
    assert scraper.delta()["num_cycles"] == 6  # 2 + 4: a second delta is still since start
    assert scraper.delta()["num_accepted_drafts"] == 12


def test_scraper_without_any_source_says_not_reported(serve):
    server = serve({"/metrics": ["# TYPE up gauge\nup 1\n"]})
    scraper = ServerAcceptance(server.url)
    scraper.start()
    assert scraper.source == NOT_REPORTED and scraper.delta() is None


def test_scraper_of_a_dead_server_says_not_reported(serve):
    server = serve({})
    server.close()
    scraper = ServerAcceptance(server.url, timeout_s=2)
    scraper.start()
    assert scraper.source == NOT_REPORTED and scraper.delta() is None


@pytest.mark.slow
def test_llama_cpp_reports_no_acceptance(tmp_path):
    from ...llama_server import LlamaServer, require_llama_cpp

    require_llama_cpp()
    with LlamaServer(tmp_path) as server:
        scraper = ServerAcceptance(server.url)
        scraper.start()
        assert scraper.source == NOT_REPORTED and scraper.delta() is None
