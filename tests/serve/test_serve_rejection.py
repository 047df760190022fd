"""`serve --spec eagle3 --spec-sampling rejection` behaves like vLLM at temperature > 0: a seeded request is
reproducible, its tokens are not a plain run's of the same seed (only the distribution is kept), and the sampled
lossless gate judges it through HTTP with a plain `serve` as the baseline that scores its outputs: PASS for the
seed's configuration (T = 1.0, top_p = 1.0), FAIL for the same server with a planted sampled class."""

from __future__ import annotations

import pytest
from specdec_eval.evals.lossless.sampled import judge_outputs
from specdec_eval.peers.client.config import EndpointConfig
from specdec_eval.peers.client.engine import EndpointEngine
from specdec_eval.workers.config import SamplingParams, SpecConfig

from ..serve_helpers import serving, tiny_engine

PROMPTS = [
    "Once upon a time",
    "The capital of France is",
    "def fibonacci(n):",
    "Dear hiring manager,",
    "In 1969, astronauts",
    "Here is a haiku about autumn:",
    "Rain, rain, go away,",
    "The quick brown fox",
]
SEED_CONFIG = SamplingParams(max_new_tokens=48, temperature=1.0, top_p=1.0, ignore_eos=True, logprobs=0)


def _client(server, tiny, spec: bool) -> EndpointEngine:
    declared = {"spec": "eagle3", "max_draft_len": 3} if spec else {}
    return EndpointEngine(EndpointConfig(url=server.url, concurrency=4, seed=7, **declared), tokenizer=tiny[1])


def _rejection_server(tiny, inject=()):
    return serving(tiny_engine(tiny, spec=SpecConfig(max_draft_len=3, sampling="rejection"), inject=inject))


@pytest.fixture(scope="module")
def baseline(tiny):
    with serving(tiny_engine(tiny)) as s:
        yield s


def test_seeded_requests_are_reproducible_and_not_the_plain_run_s_tokens(tiny, baseline):
    with _rejection_server(tiny) as server:
        client = _client(server, tiny, spec=True)
        first = client.generate(PROMPTS[:4], SEED_CONFIG)
        again = client.generate(PROMPTS[:4], SEED_CONFIG)
    plain = _client(baseline, tiny, spec=False).generate(PROMPTS[:4], SEED_CONFIG)
    assert [o.token_ids for o in first] == [o.token_ids for o in again]
    assert [o.token_ids for o in first] != [o.token_ids for o in plain]
    assert all(o.logprobs is not None and len(o.logprobs) == 48 for o in first)


@pytest.mark.parametrize("inject, verdict", [((), "PASS"), (("rejection_greedy",), "FAIL")], ids=["clean", "greedy"])
def test_the_sampled_gate_judges_a_rejection_server_through_http(tiny, baseline, inject, verdict):
    with _rejection_server(tiny, inject) as server:
        outputs = _client(server, tiny, spec=True).generate(PROMPTS, SEED_CONFIG)
    scorer = _client(baseline, tiny, spec=False)
    result = judge_outputs(outputs, [SEED_CONFIG] * len(PROMPTS), list(range(len(PROMPTS))), scorer)
    assert result.verdict == verdict, result.reason
    # T = 1 without filters: the top logprobs and the tail's known mass place every token exactly
    assert result.numbers["basis"] == "exact" and result.numbers["positions"] == 48 * len(PROMPTS)
    assert result.numbers["target"]["max_abs_diff"] < 1e-3  # the server's logprobs are its target's
