"""Our server as the peer of our client: lm-eval's local-completions backend (peers/client/engine.py, what
`run --endpoint` uses) gets the offline engine's tokens, and the acceptance it scrapes from /metrics
(peers/server/metrics.py) equals the engine's own counters. (The scraper alone:
tests/serve/test_serve_batching.py.)"""

from __future__ import annotations

import pytest
from specdec_eval.peers.client.config import EndpointConfig
from specdec_eval.peers.client.engine import EndpointEngine
from specdec_eval.peers.server.metrics import ServerAcceptance
from specdec_eval.serve.bench import bench_prompts
from specdec_eval.workers.config import SamplingParams, SpecConfig

from ..serve_helpers import MODEL, serving, tiny_engine


@pytest.fixture(scope="module")
def spec_pair(tiny):
    spec = {"spec": SpecConfig(max_draft_len=3)}
    return tiny_engine(tiny, **spec), tiny_engine(tiny, **spec)


def test_lm_eval_client_gets_offline_tokens_and_the_engine_counters(tiny, spec_pair):
    engine, offline = spec_pair
    prompts = bench_prompts(6)
    want = offline.generate(prompts, SamplingParams(max_new_tokens=20))
    with serving(engine) as server:
        scraper = ServerAcceptance(server.url, model=MODEL)
        scraper.start()
        # lm-eval's own local-completions backend as the client (what `run --endpoint` uses)
        client = EndpointEngine(
            EndpointConfig(url=server.url + "/v1", spec="eagle3", max_draft_len=3, concurrency=3), tokenizer=tiny[1]
        )
        got = client.generate(prompts, SamplingParams(max_new_tokens=20))
        delta, through_client = scraper.delta(), client.reported_acceptance()
    assert [o.token_ids for o in got] == [o.token_ids for o in want]
    assert [o.text for o in got] == [o.text for o in want]
    own = engine.reported_acceptance()
    assert own["num_cycles"] > 0
    keys = ("num_cycles", "num_draft_tokens", "num_accepted_drafts", "accepted_per_position", "acceptance_length")
    assert {k: delta[k] for k in keys} == {k: own[k] for k in keys}
    assert {k: through_client[k] for k in keys} == {k: own[k] for k in keys}
    assert delta["source"].startswith("vllm names") and delta["scope"] == "run"
