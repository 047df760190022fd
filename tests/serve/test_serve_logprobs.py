"""Log-probabilities through `specdec-eval serve` (OpenAI's completions and chat shapes, equal to what the engine
records offline) and back through the endpoint engine (peers/client/logprobs.py), which reads both shapes,
llama.cpp's server's included, into the records the lossless gate's margins use."""

from __future__ import annotations

import httpx
import pytest
from specdec_eval.peers.client.config import EndpointConfig
from specdec_eval.peers.client.engine import EndpointEngine
from specdec_eval.peers.client.logprobs import UnusableLogprobs, parse_logprobs, token_key
from specdec_eval.peers.client.requests import gen_kwargs
from specdec_eval.workers.config import SamplingParams

from ..serve_helpers import MODEL, serving, tiny_engine

PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def offline(tiny):
    return tiny_engine(tiny).generate([PROMPT], SamplingParams(max_new_tokens=12, logprobs=3))[0]


@pytest.fixture(scope="module")
def server(tiny):
    with serving(tiny_engine(tiny)) as s:
        yield s


def test_completions_logprobs_shape_and_values(server, offline, tiny):
    body = {"model": MODEL, "prompt": PROMPT, "max_tokens": 12, "temperature": 0, "logprobs": 3}
    choice = httpx.post(server.url + "/v1/completions", json=body, timeout=60).json()["choices"][0]
    lp = choice["logprobs"]
    assert set(lp) == {"tokens", "token_logprobs", "top_logprobs", "text_offset"}
    assert choice["token_ids"] == offline.token_ids and len(lp["tokens"]) == len(offline.token_ids)
    assert lp["token_logprobs"] == [rec[0] for rec in offline.logprobs]
    assert all(len(top) <= 3 for top in lp["top_logprobs"])
    assert lp["tokens"] == [tiny[1].decode([t]) for t in offline.token_ids]
    assert lp["text_offset"][0] == 0 and lp["text_offset"] == sorted(lp["text_offset"])


def test_chat_logprobs_shape(server):
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Hi"}],
        "max_tokens": 6,
        "temperature": 0,
        "logprobs": True,
        "top_logprobs": 2,
    }
    choice = httpx.post(server.url + "/v1/chat/completions", json=body, timeout=60).json()["choices"][0]
    content = choice["logprobs"]["content"]
    assert len(content) == len(choice["token_ids"])
    assert all({"token", "logprob", "bytes", "top_logprobs"} <= set(e) and len(e["top_logprobs"]) == 2 for e in content)
    assert all(e["top_logprobs"][0]["logprob"] >= e["logprob"] for e in content)  # greedy: the best is the token


@pytest.mark.parametrize(
    "body,path",
    [
        ({"prompt": "hi", "logprobs": 1, "stream": True}, "/v1/completions"),
        ({"prompt": "hi", "logprobs": 6}, "/v1/completions"),
        ({"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 2}, "/v1/chat/completions"),
        (
            {"messages": [{"role": "user", "content": "hi"}], "logprobs": True, "top_logprobs": 21},
            "/v1/chat/completions",
        ),
    ],
    ids=["stream", "above 5", "top without logprobs", "above 20"],
)
def test_bad_logprobs_requests_are_400(server, body, path):
    answer = httpx.post(server.url + path, json=body, timeout=60)
    assert answer.status_code == 400 and "logprobs" in answer.json()["error"]["message"]


def test_no_logprobs_unless_asked(server):
    body = {"prompt": PROMPT, "max_tokens": 4, "temperature": 0}
    assert httpx.post(server.url + "/v1/completions", json=body, timeout=60).json()["choices"][0]["logprobs"] is None


@pytest.mark.parametrize("chat", [False, True], ids=["completions", "chat"])
def test_endpoint_engine_reads_logprobs_as_the_engine_records_them(server, tiny, chat):
    """Through the endpoint engine the records equal the offline engine's, token ids included: our server's model card
    says it takes vLLM's return_tokens_as_token_ids, so the engine asks for ids, not texts (tiny's byte tokens print
    alike as U+FFFD, and a top_logprobs dict keyed by text merged them: a divergence there had no margin)."""
    engine = EndpointEngine(EndpointConfig(url=server.url, chat=chat, tokenizer=None), tokenizer=tiny[1])
    prompt = [{"role": "user", "content": "Hi"}] if chat else PROMPT
    want = tiny_engine(tiny).generate([prompt], SamplingParams(max_new_tokens=8, logprobs=2))[0]
    got = engine.generate([prompt], SamplingParams(max_new_tokens=8, logprobs=2))[0]
    engine.close()
    # Values within float32 noise, not bit for bit: the server's prefill of this prompt may take another kernel path
    # (other batch shapes, a prefix reused from an earlier test's request) than a fresh engine's, and on an AMD EPYC
    # (AVX2) that moved a logprob in its fifth decimal. What is read must be exact: the token ids, in order.
    assert [r[0] for r in got.logprobs] == pytest.approx([r[0] for r in want.logprobs], abs=1e-4)
    assert [r[2] for r in got.logprobs] == list(want.token_ids)
    assert [[a[0] for a in r[1]] for r in got.logprobs] == [[a[0] for a in r[1]] for r in want.logprobs]
    for mine, theirs in zip(got.logprobs, want.logprobs, strict=True):
        assert [a[1] for a in mine[1]] == pytest.approx([a[1] for a in theirs[1]], abs=1e-4)


def test_tokens_named_by_id_when_asked(server, tiny):
    """vLLM's return_tokens_as_token_ids: "token_id:N" in both shapes, read back as N by the endpoint's key."""
    body = {"prompt": PROMPT, "max_tokens": 4, "temperature": 0, "logprobs": 2, "return_tokens_as_token_ids": True}
    choice = httpx.post(server.url + "/v1/completions", json=body, timeout=60).json()["choices"][0]
    assert choice["logprobs"]["tokens"] == [f"token_id:{t}" for t in choice["token_ids"]]
    assert all(name.startswith("token_id:") for top in choice["logprobs"]["top_logprobs"] for name in top)
    chat = {
        "messages": [{"role": "user", "content": "Hi"}],
        "max_tokens": 4,
        "temperature": 0,
        "logprobs": True,
        "top_logprobs": 2,
        "return_tokens_as_token_ids": True,
    }
    content = httpx.post(server.url + "/v1/chat/completions", json=chat, timeout=60).json()["choices"][0]
    assert [e["token"] for e in content["logprobs"]["content"]] == [f"token_id:{t}" for t in content["token_ids"]]
    key = token_key(tiny[1])
    assert key("token_id:123") == 123 and key("token_id:x") < 0  # not an id: hashed like any other text


def test_gen_kwargs_ask_in_each_api_shape():
    params = SamplingParams(logprobs=5)
    assert gen_kwargs(params, None)["logprobs"] == 5
    assert {k: gen_kwargs(params, None, chat=True)[k] for k in ("logprobs", "top_logprobs")} == {
        "logprobs": True,
        "top_logprobs": 5,
    }
    assert "logprobs" not in gen_kwargs(SamplingParams(), None)
    assert "return_tokens_as_token_ids" not in gen_kwargs(params, None)  # a strict server would refuse it
    assert gen_kwargs(params, None, token_ids=True)["return_tokens_as_token_ids"] is True


def test_llama_cpp_shapes_parse(tiny):
    """llama-cpp-python's answers (llama_cpp/llama.py, llama_chat_format.py): the completions dict of top logprobs
    also holds the chosen token; chat entries carry `bytes: None`. No logprobs read as None; a missing entry is
    refused (never a margin)."""
    key = token_key(tiny[1])
    completions = {
        "logprobs": {
            "tokens": [" a", " b"],
            "text_offset": [10, 12],
            "token_logprobs": [-0.5, -0.1],
            "top_logprobs": [{" c": -0.4, " a": -0.5}, {" b": -0.1}],
        }
    }
    recs = parse_logprobs(completions, key)
    assert recs == [[-0.5, [[key(" c"), -0.4], [key(" a"), -0.5]], key(" a")], [-0.1, [[key(" b"), -0.1]], key(" b")]]
    chat = {
        "logprobs": {
            "content": [
                {
                    "token": " a",
                    "bytes": None,
                    "logprob": -0.5,
                    "top_logprobs": [
                        {"token": " a", "logprob": -0.5, "bytes": None},
                        {"token": " c", "logprob": -0.4, "bytes": None},
                    ],
                }
            ],
            "refusal": None,
        }
    }
    assert parse_logprobs(chat, key) == [recs[0]]
    assert parse_logprobs({"logprobs": None}, key) is None
    with pytest.raises(UnusableLogprobs, match="token 0: the emitted token's logprob is missing"):
        parse_logprobs({"logprobs": {"tokens": [" a"], "token_logprobs": [None]}}, key)
