"""Scoring a prompt through `specdec-eval serve` (teacher forcing): completions' `echo` with `logprobs` (OpenAI's
legacy shape, what lm-eval's loglikelihood requests send) and vLLM's `prompt_logprobs`, equal to the engine's own
`score_outputs`; and the endpoint engine's `score_outputs` (workers/remote/endpoint_scoring.py) reading both back."""

from __future__ import annotations

import httpx
import pytest
from specdec_eval.workers.config import SamplingParams
from specdec_eval.workers.interface import ScoreRequest
from specdec_eval.workers.remote.endpoint import EndpointEngine
from specdec_eval.workers.remote.endpoint_config import EndpointConfig
from specdec_eval.workers.remote.endpoint_scoring import read_scoring, scoring_payload

from ..serve_helpers import MODEL, serving, tiny_engine

PROMPT = "The capital of France is Paris, and the capital of Italy is"
T07 = SamplingParams(temperature=0.7, top_k=20, top_p=0.9)


@pytest.fixture(scope="module")
def offline(tiny):
    engine = tiny_engine(tiny)
    ids = engine.encode(PROMPT)
    (scored,) = engine.score_outputs([ScoreRequest((ids[0],), tuple(ids[1:]), SamplingParams(), 5)])
    return ids, scored


@pytest.fixture(scope="module")
def server(tiny):
    with serving(tiny_engine(tiny)) as s:
        yield s


def _post(server, body):
    return httpx.post(server.url + "/v1/completions", json={"model": MODEL, **body}, timeout=60)


def test_echo_with_logprobs_scores_the_prompt_then_the_completion(server, offline, tiny):
    ids, scored = offline
    body = {"prompt": PROMPT, "echo": True, "logprobs": 3, "max_tokens": 4, "temperature": 0,
            "return_tokens_as_token_ids": True}  # byte tokens that print alike stay apart  # fmt: skip
    choice = _post(server, body).json()["choices"][0]
    lp = choice["logprobs"]
    assert choice["text"].startswith(PROMPT) and len(lp["tokens"]) == len(ids) + 4
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    assert lp["token_logprobs"][1 : len(ids)] == pytest.approx(scored.logprobs, abs=1e-5)
    assert [list(top) for top in lp["top_logprobs"][1 : len(ids)]] == [
        [f"token_id:{t}" for t, _ in alts[:3]] for alts in scored.top_logprobs]  # fmt: skip
    assert lp["tokens"][: len(ids)] == [f"token_id:{t}" for t in ids]
    assert lp["text_offset"] == sorted(lp["text_offset"]) and lp["text_offset"][len(ids)] == len(
        "".join(tiny[1].decode([t]) for t in ids))  # fmt: skip


def test_echo_with_max_tokens_0_only_scores_and_prompt_logprobs_take_vllm_s_shape(server, offline, tiny):
    ids, scored = offline
    body = {"prompt": ids, "echo": True, "max_tokens": 0, "logprobs": 1, "prompt_logprobs": 5}
    choice = _post(server, body).json()["choices"][0]
    assert choice["token_ids"] == [] and choice["text"] == tiny[1].decode(ids)
    assert len(choice["logprobs"]["tokens"]) == len(ids)
    entries = choice["prompt_logprobs"]
    assert entries[0] is None and len(entries) == len(ids)
    for token, entry, lp, rank, alts in zip(ids[1:], entries[1:], scored.logprobs, scored.ranks,
                                            scored.top_logprobs, strict=True):  # fmt: skip
        assert entry[str(token)]["logprob"] == pytest.approx(lp, abs=1e-6) and entry[str(token)]["rank"] == rank
        ranked = sorted((v["rank"], int(t)) for t, v in entry.items() if v["rank"] <= 5)
        assert [t for _, t in ranked] == [t for t, _ in alts]


def test_the_endpoint_engine_scores_through_the_server_as_the_engine_does_in_process(server, tiny):
    engine = tiny_engine(tiny)
    outputs = engine.generate([PROMPT, "Once upon a time"],
                              [SamplingParams(max_new_tokens=16, temperature=0.7, seed=s) for s in (1, 2)])  # fmt: skip
    requests = [ScoreRequest(tuple(o.prompt_token_ids), tuple(o.token_ids), T07, 20) for o in outputs]
    local = engine.score_outputs(requests)
    client = EndpointEngine(EndpointConfig(url=server.url, concurrency=2), tokenizer=tiny[1])
    remote = client.score_outputs(requests)
    for a, b in zip(local, remote, strict=True):
        assert b.error is None and b.sampled is None  # only the top logprobs travel
        assert b.logprobs == pytest.approx(a.logprobs, abs=1e-5)
        assert [[t for t, _ in top] for top in b.top_logprobs] == [[t for t, _ in top] for top in a.top_logprobs]
        assert b.token_keys is None and b.ranks == a.ranks  # ids, via vLLM's prompt_logprobs


def test_the_legacy_echo_shape_reads_back_through_token_keys(server, tiny, offline):
    """A server without vLLM's extensions: `logprobs: k` with echo, tokens named by text."""
    ids, scored = offline
    request = ScoreRequest((ids[0],), tuple(ids[1:]), T07, 5)
    response = _post(server, scoring_payload(MODEL, request, vllm_extensions=False) | {"model": MODEL}).json()
    client = EndpointEngine(EndpointConfig(url=server.url), tokenizer=tiny[1])
    legacy = read_scoring(response, request, client._token_key)
    assert legacy.logprobs == pytest.approx(scored.logprobs, abs=1e-5)
    # tokens named by text: two that print alike share a key, and a top dict keeps one of them
    assert len(legacy.token_keys) == len(ids) - 1 and all(1 <= len(top) <= 5 for top in legacy.top_logprobs)


def test_lm_eval_loglikelihood_runs_against_the_server(server, tiny, offline, tmp_path):
    """lm-eval's own local-completions backend asks echo + logprobs 1 + max_tokens 1 for a loglikelihood request and
    sums the continuation's echoed logprobs: the engine's own score of the same tokens."""
    from lm_eval.api.instance import Instance
    from lm_eval.models.openai_completions import LocalCompletionsAPI

    ids, scored = offline
    tiny[1].save_pretrained(tmp_path)
    lm = LocalCompletionsAPI(base_url=server.url + "/v1/completions", model=MODEL, tokenizer_backend="huggingface",
                             tokenizer=str(tmp_path), tokenized_requests=True, num_concurrent=1,
                             max_retries=1)  # fmt: skip
    context, continuation = tiny[1].decode(ids[:5]), tiny[1].decode(ids[5:])
    ((logprob, _greedy),) = lm.loglikelihood([Instance("loglikelihood", {}, (context, continuation), 0)])
    # the tokens lm-eval scored: it splits the pair its own way (a context's trailing space moves to the continuation)
    ((own, _),) = tiny_engine(tiny).score([lm._encode_pair(context, continuation)])
    assert logprob == pytest.approx(own, abs=1e-3)
