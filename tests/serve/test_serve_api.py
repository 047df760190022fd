"""`specdec-eval serve`'s API against our offline engine: the same tokens for the same prompts (greedy and seeded
sampling, completions and chat, streamed and not, stop strings), OpenAI's shapes, and every bad request's 4xx
with the server still answering afterwards. A tiny-model server runs on a thread of the test process."""

from __future__ import annotations

import httpx
import pytest
from specdec_eval.workers.config import SamplingParams

from ..serve_helpers import MODEL, OPENAI_FINISH, joined, serving, stream, tiny_engine

PROMPTS = ["The capital of France is", "def fibonacci(n):", "Q: What is 15 times 4?\nA:"]
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a mammal that can fly."}]


@pytest.fixture(scope="module")
def offline(tiny):
    return tiny_engine(tiny)


@pytest.fixture(scope="module")
def client(tiny):
    with serving(tiny_engine(tiny)) as server, httpx.Client(base_url=server.url, timeout=60) as c:
        yield c


def _same(choice: dict, out, chat: bool = False) -> None:
    text = choice["message"]["content"] if chat else choice["text"]
    assert (text, choice["token_ids"]) == (out.text, out.token_ids)
    assert choice["finish_reason"] == OPENAI_FINISH[out.finish_reason]


@pytest.mark.parametrize("sampled", [False, True], ids=["greedy", "seeded"])
def test_completions_equal_offline_streamed_and_not(client, offline, sampled):
    knobs = {"temperature": 0.9, "top_p": 0.9, "top_k": 50, "seed": 11} if sampled else {"temperature": 0}
    params = SamplingParams(max_new_tokens=24, **knobs)
    want = offline.generate(PROMPTS, params)
    for prompt, out in zip(PROMPTS, want, strict=True):
        body = {"model": MODEL, "prompt": prompt, "max_tokens": 24, **knobs}
        answer = client.post("/v1/completions", json=body).json()
        assert answer["object"] == "text_completion" and answer["model"] == MODEL and answer["id"].startswith("cmpl-")
        _same(answer["choices"][0], out)
        assert answer["choices"][0]["prompt_token_ids"] == out.prompt_token_ids
        assert answer["usage"] == {
            "prompt_tokens": len(out.prompt_token_ids),
            "completion_tokens": len(out.token_ids),
            "total_tokens": len(out.prompt_token_ids) + len(out.token_ids),
        }
        streamed = joined(stream(client, "/v1/completions", body))
        assert (streamed["text"], streamed["token_ids"]) == (out.text, out.token_ids)
        assert streamed["finish_reason"] == OPENAI_FINISH[out.finish_reason]


def test_token_prompts_and_a_batch_of_prompts(client, offline):
    ids = offline.encode(PROMPTS[0])
    want = offline.generate([ids, PROMPTS[1]], SamplingParams(max_new_tokens=8))
    single = client.post("/v1/completions", json={"prompt": ids, "max_tokens": 8, "temperature": 0}).json()
    _same(single["choices"][0], want[0])
    both = client.post(
        "/v1/completions", json={"prompt": [PROMPTS[0], PROMPTS[1]], "max_tokens": 8, "temperature": 0}
    ).json()
    assert [c["index"] for c in both["choices"]] == [0, 1]
    for choice, out in zip(both["choices"], want, strict=True):
        _same(choice, out)


def test_chat_equals_offline_chat_template(client, offline):
    out = offline.generate([MESSAGES], SamplingParams(max_new_tokens=20))[0]
    body = {"model": MODEL, "messages": MESSAGES, "max_tokens": 20, "temperature": 0}
    answer = client.post("/v1/chat/completions", json=body).json()
    assert answer["object"] == "chat.completion" and answer["choices"][0]["message"]["role"] == "assistant"
    _same(answer["choices"][0], out, chat=True)
    assert answer["choices"][0]["prompt_token_ids"] == offline.encode(MESSAGES)
    events = stream(client, "/v1/chat/completions", {**body, "stream_options": {"include_usage": True}})
    assert events[0]["object"] == "chat.completion.chunk" and events[0]["choices"][0]["delta"]["role"] == "assistant"
    assert events[-2]["choices"] == [] and events[-2]["usage"]["completion_tokens"] == len(out.token_ids)
    streamed = joined(events, chat=True)
    assert (streamed["text"], streamed["token_ids"]) == (out.text, out.token_ids)


def test_stop_strings_cut_the_answer_as_offline(client, offline):
    free = offline.generate([PROMPTS[0]], SamplingParams(max_new_tokens=40))[0].text
    # A two-character piece of the free answer from its middle: the same request with it as a stop string ends there.
    start = next(i for i in range(4, len(free) - 2) if "\ufffd" not in free[i : i + 2] and free[i : i + 2].strip())
    stop = free[start : start + 2]
    out = offline.generate([PROMPTS[0]], SamplingParams(max_new_tokens=40, stop=(stop, "never-there")))[0]
    assert out.finish_reason == "stop" and stop not in out.text
    body = {"prompt": PROMPTS[0], "max_tokens": 40, "temperature": 0, "stop": [stop, "never-there"]}
    choice = client.post("/v1/completions", json=body).json()["choices"][0]
    _same(choice, out)
    assert choice["stop_reason"] == stop
    streamed = joined(stream(client, "/v1/completions", {**body, "stop": stop}))
    assert (streamed["text"], streamed["token_ids"], streamed["finish_reason"]) == (out.text, out.token_ids, "stop")


def _too_long_prompt(_):
    return {"prompt": "x" * 3000, "max_tokens": 4}  # the tiny tokenizer: one token per byte, context 2048


BAD_REQUESTS = [
    ("malformed JSON", {"content": b'{"prompt": "hi",'}, 400),
    ("not an object", {"json": ["hi"]}, 400),
    ("no prompt", {"json": {"max_tokens": 4}}, 400),
    ("unknown model", {"json": {"model": "gpt-7", "prompt": "hi"}}, 404),
    ("max_tokens beyond the context", {"json": {"prompt": "hi", "max_tokens": 4096}}, 400),
    ("prompt beyond the context", {"json": _too_long_prompt(None)}, 400),
    ("negative temperature", {"json": {"prompt": "hi", "temperature": -0.5}}, 400),
    ("top_p zero", {"json": {"prompt": "hi", "top_p": 0}}, 400),
    ("top_p above one", {"json": {"prompt": "hi", "top_p": 1.5}}, 400),
    ("max_tokens zero", {"json": {"prompt": "hi", "max_tokens": 0}}, 400),
    ("n = 2", {"json": {"prompt": "hi", "n": 2}}, 400),
    ("logprobs in a stream", {"json": {"prompt": "hi", "logprobs": 1, "stream": True}}, 400),
    ("token id outside the vocabulary", {"json": {"prompt": [1, 99999]}}, 400),
    ("empty prompt", {"json": {"prompt": []}}, 400),
    ("a 1 MB prompt", {"json": {"prompt": "x" * 1_100_000}}, 413),
    # not JSON as the standard has it, or not text: a 400 with its reason, never a 200 or a 500
    ("temperature NaN", {"content": b'{"prompt": "hi", "temperature": NaN}'}, 400),
    ("top_p Infinity", {"content": b'{"prompt": "hi", "top_p": Infinity}'}, 400),
    ("temperature 1e400", {"content": b'{"prompt": "hi", "temperature": 1e400}'}, 400),
    ("a lone surrogate", {"content": b'{"prompt": "a \\ud800 b"}'}, 400),
    ("a lone surrogate in a key", {"content": b'{"prompt": "a", "user\\udfff": 1}'}, 400),
    ("nested 5000 deep", {"content": b'{"prompt": ' + b"[" * 5000 + b"]" * 5000 + b"}"}, 400),
    ("more prompts than the queue holds", {"json": {"prompt": ["a"] * 1025, "max_tokens": 1}}, 400),
]


@pytest.mark.parametrize("what, request_kwargs, status", BAD_REQUESTS, ids=[b[0] for b in BAD_REQUESTS])
def test_a_bad_request_gets_its_4xx_and_the_server_keeps_serving(client, what, request_kwargs, status):
    response = client.post("/v1/completions", **request_kwargs)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "code"} and error["message"]
    ok = client.post("/v1/completions", json={"prompt": "hi", "max_tokens": 2, "temperature": 0})
    assert ok.status_code == 200 and len(ok.json()["choices"][0]["token_ids"]) == 2


def test_a_tiny_temperature_decodes_greedily_and_a_surrogate_pair_is_text(client):
    """Temperatures below workers.config.GREEDY_BELOW (1e-5) decode greedily: 1e-40 once drew token 0 every time
    (float32 logits / 1e-40 overflow into NaN probabilities)."""
    greedy = client.post("/v1/completions", json={"prompt": "hi", "max_tokens": 5, "temperature": 0}).json()
    for t in (1e-40, 1e-6):
        tiny = client.post("/v1/completions", json={"prompt": "hi", "max_tokens": 5, "temperature": t}).json()
        assert tiny["choices"][0]["token_ids"] == greedy["choices"][0]["token_ids"], t
    assert greedy["choices"][0]["token_ids"] != [0] * 5
    pair = client.post("/v1/completions", content=b'{"prompt": "\\ud83d\\ude00", "max_tokens": 2, "temperature": 0}')
    assert pair.status_code == 200 and pair.json()["choices"][0]["prompt_token_ids"]


def test_chat_with_a_lone_surrogate_is_a_400(client):
    body = b'{"messages": [{"role": "user", "content": "\\udc00"}], "max_tokens": 2}'
    r = client.post("/v1/chat/completions", content=body)
    assert r.status_code == 400 and "lone surrogate (U+DC00)" in r.json()["error"]["message"]


def test_a_bug_of_ours_is_a_json_500_that_quotes_nothing(client, monkeypatch):
    from specdec_eval.serve import routes

    def broken(*args):
        raise RuntimeError("secret prompt text")

    monkeypatch.setattr(routes, "completion_input", broken)
    r = client.post("/v1/completions", json={"prompt": "hi"})
    want = {"message": "internal server error (RuntimeError)", "type": "internal_error", "code": "internal_error"}
    assert r.status_code == 500 and r.json()["error"] == want
    monkeypatch.undo()
    assert client.post("/v1/completions", json={"prompt": "hi", "max_tokens": 2}).status_code == 200


def test_bad_chat_requests_and_unknown_routes(client):
    assert client.post("/v1/chat/completions", json={"messages": []}).status_code == 400
    assert client.post("/v1/chat/completions", json={"messages": [{"content": "no role"}]}).status_code == 400
    image = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]
    assert client.post("/v1/chat/completions", json={"messages": image}).status_code == 400
    for response, status in ((client.get("/v1/nowhere"), 404), (client.get("/v1/completions"), 405)):
        assert response.status_code == status and response.json()["error"]["message"]


def test_models_health_version_metrics(client):
    models = client.get("/v1/models").json()
    assert models["object"] == "list" and [m["id"] for m in models["data"]] == [MODEL]
    assert models["data"][0]["max_model_len"] == 2048
    assert client.get("/health").json() == {"status": "ok"}
    assert client.get("/version").json()["version"]
    assert client.get("/health").headers["server"].startswith("specdec-eval/")
    metrics = client.get("/metrics")
    assert metrics.headers["content-type"].startswith("text/plain")
    assert 'vllm:request_success_total{finished_reason="length",model_name="tiny"}' in metrics.text
    assert "vllm:spec_decode_num_drafts" not in metrics.text  # plain decoding reports no spec-decode series
