"""Scoring a prompt through `specdec-eval serve` (teacher forcing): completions' `echo` with `logprobs` (OpenAI's
legacy shape, what lm-eval's loglikelihood requests send) and vLLM's `prompt_logprobs`, equal to the engine's own
`score_outputs`; and the endpoint engine's `score_outputs` (peers/client/scoring.py) reading both back."""

from __future__ import annotations

import math

import httpx
import pytest
from specdec_eval.peers.client.config import EndpointConfig
from specdec_eval.peers.client.engine import EndpointEngine
from specdec_eval.peers.client.scoring import read_scoring, scoring_payload
from specdec_eval.workers.config import SamplingParams
from specdec_eval.workers.interface import ScoreRequest

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
    body = {
        "prompt": PROMPT,
        "echo": True,
        "logprobs": 3,
        "max_tokens": 4,
        "temperature": 0,
        "return_tokens_as_token_ids": True,
    }  # byte tokens that print alike stay apart
    choice = _post(server, body).json()["choices"][0]
    lp = choice["logprobs"]
    assert choice["text"].startswith(PROMPT) and len(lp["tokens"]) == len(ids) + 4
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    assert lp["token_logprobs"][1 : len(ids)] == pytest.approx(scored.logprobs, abs=1e-5)
    assert [list(top) for top in lp["top_logprobs"][1 : len(ids)]] == [
        [f"token_id:{t}" for t, _ in alts[:3]] for alts in scored.top_logprobs
    ]
    assert lp["tokens"][: len(ids)] == [f"token_id:{t}" for t in ids]
    assert lp["text_offset"] == sorted(lp["text_offset"]) and lp["text_offset"][len(ids)] == len(
        "".join(tiny[1].decode([t]) for t in ids)
    )


def test_echo_with_max_tokens_0_only_scores_and_prompt_logprobs_take_vllm_s_shape(server, offline, tiny):
    ids, scored = offline
    body = {"prompt": ids, "echo": True, "max_tokens": 0, "logprobs": 1, "prompt_logprobs": 5}
    choice = _post(server, body).json()["choices"][0]
    assert choice["token_ids"] == [] and choice["text"] == tiny[1].decode(ids)
    assert len(choice["logprobs"]["tokens"]) == len(ids)
    entries = choice["prompt_logprobs"]
    assert entries[0] is None and len(entries) == len(ids)
    for token, entry, lp, rank, alts in zip(
        ids[1:], entries[1:], scored.logprobs, scored.ranks, scored.top_logprobs, strict=True
    ):
        assert entry[str(token)]["logprob"] == pytest.approx(lp, abs=1e-6) and entry[str(token)]["rank"] == rank
        ranked = sorted((v["rank"], int(t)) for t, v in entry.items() if v["rank"] <= 5)
        assert [t for _, t in ranked] == [t for t, _ in alts]


def test_the_endpoint_engine_scores_through_the_server_as_the_engine_does_in_process(server, tiny):
    engine = tiny_engine(tiny)
    outputs = engine.generate(
        [PROMPT, "Once upon a time"], [SamplingParams(max_new_tokens=16, temperature=0.7, seed=s) for s in (1, 2)]
    )
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
    expected = [client._token_key(tiny[1].decode([t])) for t in ids[1:]]  # the output's tokens as text names them
    legacy = read_scoring(response, request, client._token_key, expected)
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
    lm = LocalCompletionsAPI(
        base_url=server.url + "/v1/completions",
        model=MODEL,
        tokenizer_backend="huggingface",
        tokenizer=str(tmp_path),
        tokenized_requests=True,
        num_concurrent=1,
        max_retries=1,
    )
    context, continuation = tiny[1].decode(ids[:5]), tiny[1].decode(ids[5:])
    ((logprob, _greedy),) = lm.loglikelihood([Instance("loglikelihood", {}, (context, continuation), 0)])
    # the tokens lm-eval scored: it splits the pair its own way (a context's trailing space moves to the continuation)
    ((own, _),) = tiny_engine(tiny).score([lm._encode_pair(context, continuation)])
    assert logprob == pytest.approx(own, abs=1e-3)


def _refusing_ids(server):
    """A `call` for ScoringChannel: our server behind a front that answers a token-id prompt as llama-cpp-python does
    (HTTP 500, a validation error) and passes text through."""
    from specdec_eval.peers.client.requests import Answer

    def call(body, sent):
        if not isinstance(body["prompt"], str):
            return Answer(None, error="HTTP 500: 1 validation error for CreateCompletionRequest prompt")
        return Answer(_post(server, body).json())

    return call


def test_a_server_that_refuses_token_ids_is_scored_as_text_and_the_run_says_so(server, tiny, offline):
    from specdec_eval.peers.client.logprobs import token_key
    from specdec_eval.peers.client.scoring import ScoringChannel

    ids, scored = offline
    channel = ScoringChannel(MODEL, tiny[1], token_key(tiny[1]), False, _refusing_ids(server))
    request = ScoreRequest((ids[0],), tuple(ids[1:]), T07, 5)
    first, second = channel.score(request), channel.score(request)
    for got in (first, second):
        assert got.error is None and got.logprobs == pytest.approx(scored.logprobs, abs=1e-5)
    record = channel.record()
    assert record["scoring_prompts"] == "text" and record["scoring_token_ids_refused"].startswith("HTTP 500: 1 valid")


def _echo_one_back(server):
    """A `call` for ScoringChannel: our server behind a front whose echo does what llama-cpp-python 0.3.x does: entry
    i holds the distribution of token i + 1 (our entry i + 1's top logprobs, plus token i's own value there: a stand-in
    far below where the top does not list it) and, as token i's own logprob, that row's value for token i."""
    from specdec_eval.peers.client.requests import Answer

    def call(body, sent):
        answer = _post(server, body).json()
        if body.get("echo"):
            lp = answer["choices"][0]["logprobs"]
            tops, tokens = lp["top_logprobs"], lp["tokens"]
            lp["top_logprobs"] = [
                {tokens[i]: -20.0, **(tops[i + 1] if i + 1 < len(tops) else {})} for i in range(len(tokens))
            ]
            lp["token_logprobs"] = [-20.0] * len(tokens)
        return Answer(answer)

    return call


QUESTION = (
    "Question: Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in "
    "May. How many clips did Natalia sell altogether in April and May?\nAnswer:"
)


@pytest.fixture(scope="module")
def smol_server(smollm2):
    """A real model: the tiny one's rows are so alike (near-uniform, its greedy output one token repeated) that no
    audit could tell one position from the next."""
    with serving(tiny_engine(smollm2)) as s:
        yield s


def _smol_request(smollm2) -> ScoreRequest:
    tok = smollm2[1]
    answer = tok.encode(" Natalia sold 48 / 2 = 24 clips in May.", add_special_tokens=False)
    return ScoreRequest(tuple(tok.encode(QUESTION, add_special_tokens=False)), tuple(answer), T07, 5)


def test_an_echo_one_position_off_is_read_one_position_back(smol_server, smollm2):
    """The audit finds llama-cpp-python's echo (emulated) disagreeing in place and agreeing one position back; every
    scoring is then read so: each token's logprob and top alternatives are the honest echo's, except a token below
    the top 5 (NaN: only bounded)."""
    from specdec_eval.peers.client.logprobs import token_key
    from specdec_eval.peers.client.requests import Answer
    from specdec_eval.peers.client.scoring import ScoringChannel

    tok = smollm2[1]
    request, key = _smol_request(smollm2), token_key(tok)
    honest = ScoringChannel(MODEL, tok, key, False, lambda body, sent: Answer(_post(smol_server, body).json()))
    shifted = ScoringChannel(MODEL, tok, key, False, _echo_one_back(smol_server))
    want, got = honest.score(request), shifted.score(request)
    assert honest.record()["scoring_audit"]["reading"] == "in place", honest.record()
    assert honest.record()["scoring_audit"]["median_abs_diff"] < 1e-3, honest.record()
    assert shifted.record()["scoring_audit"]["reading"] == "one position back", shifted.record()
    assert got.error is None and got.token_keys == want.token_keys
    pairs = zip(want.token_keys, got.logprobs, got.top_logprobs, want.logprobs, want.top_logprobs, strict=True)
    for mine, own, alts, their_own, their_alts in pairs:  # two requests: near-ties may swap places (KV reuse)
        assert dict(alts) == pytest.approx(dict(their_alts[:5]), abs=1e-4)
        listed = mine in dict(alts)
        assert (own == pytest.approx(their_own, abs=1e-4)) if listed else math.isnan(own)


def test_a_server_whose_echo_disagrees_with_its_own_generation_scores_nothing(smol_server, smollm2):
    """The audit (peers/client/scoring_audit.py): echoed own logprobs 2 nats off the generation's (its top
    alternatives right) refuse every scoring with the reason, in place and one back: NO-GATE, never a FAIL."""
    from specdec_eval.peers.client.logprobs import token_key
    from specdec_eval.peers.client.requests import Answer
    from specdec_eval.peers.client.scoring import ScoringChannel

    def off_by_two_nats(body, sent):
        answer = _post(smol_server, body).json()
        if body.get("echo"):
            lp = answer["choices"][0]["logprobs"]
            lp["token_logprobs"] = [None if v is None else v - 2.0 for v in lp["token_logprobs"]]
        return Answer(answer)

    lying = ScoringChannel(MODEL, smollm2[1], token_key(smollm2[1]), False, off_by_two_nats)
    got = lying.score(_smol_request(smollm2))
    assert got.error is not None and "2.00 nats off" in got.error and lying.record()["scoring_audit"]["agrees"] is False
