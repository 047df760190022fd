"""`serve --gpus N`'s engine (launch/serving.py `ShardedServingEngine`): the serving protocol over every replica in
lockstep. Fast here on a one-rank gloo group in this process (the same broadcasts and gathers, one replica); the
two-rank job through the command is in tests/serve/test_serve_cli.py."""

from __future__ import annotations

import socket

import httpx
import pytest
import torch.distributed as dist
from specdec_eval.launch.dist import World
from specdec_eval.launch.layout import Layout
from specdec_eval.launch.serving import ShardedServingEngine
from specdec_eval.serve.app import ServerSettings
from specdec_eval.serve.server import BackgroundServer
from specdec_eval.workers.config import SamplingParams, SpecConfig
from specdec_eval.workers.model.parallel import TPGroup

from specdec_eval.errors import UserError

from ..serve_helpers import MODEL, tiny_engine


@pytest.fixture
def world():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        yield World(0, Layout(1, 1), TPGroup(), dist.group.WORLD)
    finally:
        dist.destroy_process_group()


def _drain(engine) -> dict[int, object]:
    outputs = {}
    while engine.has_unfinished_requests:
        for delta in engine.step():
            if delta.finished:
                outputs[delta.request_id] = delta.output
    return outputs


def test_the_sharded_engine_serves_like_the_local_one(tiny, world):
    spec = {"spec": SpecConfig(max_draft_len=2)}
    sharded, offline = ShardedServingEngine(tiny_engine(tiny, **spec), world), tiny_engine(tiny, **spec)
    prompts = ["The capital of France is", "def fibonacci(n):", "Once upon a time"]
    params = SamplingParams(max_new_tokens=12)
    want = offline.generate(prompts, params)
    ids = [sharded.add_request(p, params) for p in prompts]
    assert ids == [0, 1, 2]
    doomed = sharded.add_request("to be aborted", SamplingParams(max_new_tokens=500, ignore_eos=True))
    sharded.step()
    assert sharded.kv_usage()["live_requests"] == 4
    assert sharded.abort(doomed) and not sharded.abort(doomed)
    outputs = _drain(sharded)
    assert [outputs[i].token_ids for i in ids] == [o.token_ids for o in want] and doomed not in outputs
    usage = sharded.kv_usage()
    assert usage["free_blocks"] == usage["num_blocks"] and usage["live_requests"] == 0
    acceptance = sharded.reported_acceptance()
    assert acceptance["num_cycles"] > 0 and acceptance["source"] == "engine counters of 1 replicas"
    assert sharded.identity.kind == "torchrun"
    sampled = SamplingParams(max_new_tokens=6, temperature=0.8)  # unseeded: each prompt's seed by its index
    assert [o.token_ids for o in sharded.generate(prompts, sampled)] == [
        o.token_ids for o in offline.generate(prompts, sampled)
    ]
    with pytest.raises(UserError, match="tokens"):  # refused on rank 0, before any broadcast
        sharded.add_request(list(range(5, 300)) * 10, params)
    sharded.close()


def test_the_server_over_the_sharded_engine(tiny, world):
    sharded, offline = ShardedServingEngine(tiny_engine(tiny), world), tiny_engine(tiny)
    want = offline.generate(["hello", "world"], SamplingParams(max_new_tokens=8))
    local = sharded.local_engine
    settings = ServerSettings(MODEL, local.max_seq_len, local.model_config.vocab_size)
    with BackgroundServer(sharded, settings) as server:
        answer = httpx.post(
            server.url + "/v1/completions",
            json={"prompt": ["hello", "world"], "max_tokens": 8, "temperature": 0},
            timeout=60,
        ).json()
    assert [c["token_ids"] for c in answer["choices"]] == [o.token_ids for o in want]
    sharded.close()
