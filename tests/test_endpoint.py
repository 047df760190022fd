"""The endpoint engine (evals/endpoint.py): an OpenAI-compatible server driven through lm-eval's own backends.

Fast tests: URLs, configuration, the mapping of our sampling parameters and of servers' answers, and a dead port.
Slow tests: against llama.cpp's real server (tests/llama_server.py) over the embedded SmolLM2 GGUF."""

from __future__ import annotations

import json

import pytest
from specdec_eval.evals.endpoint import EndpointEngine
from specdec_eval.evals.endpoint_config import EndpointConfig, EndpointURL
from specdec_eval.evals.endpoint_requests import gen_kwargs, read_choice
from specdec_eval.evals.server_metrics import NOT_REPORTED
from specdec_eval.workers.config import SamplingParams
from specdec_eval.workers.errors import UserError

from .llama_server import N_CTX, SERVED_MODEL, LlamaServer, free_port, require_llama_cpp

# ------------------------------------------------------------------------------------------------- fast


@pytest.mark.parametrize(
    "url, root, public",
    [
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000", "http://127.0.0.1:8000"),
        ("http://127.0.0.1:8000/v1/", "http://127.0.0.1:8000", "http://127.0.0.1:8000"),
        ("http://h:1/v1/chat/completions", "http://h:1", "http://h:1"),
        ("https://u:secret@gw.example/team/v1/completions", "https://u:secret@gw.example/team",
         "https://gw.example/team"),
    ],
)  # fmt: skip
def test_urls_keep_credentials_out_of_the_public_form(url, root, public):
    parsed = EndpointURL.parse(url)
    assert (parsed.root, parsed.public) == (root, public)
    assert parsed.completions == root + "/v1/completions"
    assert "secret" not in parsed.public


@pytest.mark.parametrize(
    "url, words",
    [
        ("localhost:8000", "http://HOST:PORT"),
        ("ftp://h/v1", "http://HOST:PORT"),
        ("http://h:1/v1?api_key=abc", "--api-key"),
        ("http://h:99999", "bad port"),
        ("http://u:abc@h:1", "not both"),
    ],
)
def test_bad_urls_are_user_errors(url, words):
    with pytest.raises(UserError, match=words.replace("+", r"\+")) as info:
        EndpointConfig(url=url, api_key="k" if "@" in url else None)
    assert "abc" not in str(info.value)


@pytest.mark.parametrize(
    "fields, words",
    [
        ({"concurrency": 0}, "concurrency"),
        ({"max_retries": -1}, "retries"),
        ({"timeout_s": 0}, "timeout"),
        ({"spec": "medusa", "max_draft_len": 3}, "unknown spec-dec"),
        ({"spec": "eagle3"}, "max draft len"),
        ({"max_draft_len": 3}, "without --spec"),
        ({"kv_cache": "v3"}, "kv-cache"),
    ],
)
def test_config_checks(fields, words):
    with pytest.raises(UserError, match=words):
        EndpointConfig(url="http://127.0.0.1:1", **fields)


def test_sampling_maps_onto_lm_eval_kwargs():
    greedy = gen_kwargs(SamplingParams(max_new_tokens=7, stop=("Q:",)), seed=None)
    assert greedy == {"until": ["Q:"], "max_gen_toks": 7, "temperature": 0.0}
    sampled = gen_kwargs(SamplingParams(temperature=0.7, top_p=0.9, top_k=20, seed=5, ignore_eos=True), seed=5)
    assert sampled["top_p"] == 0.9 and sampled["top_k"] == 20 and sampled["seed"] == 5 and sampled["ignore_eos"]


def test_lm_eval_builds_the_payload_from_those_kwargs():
    """The payload is lm-eval's own: until -> stop, max_gen_toks -> max_tokens, the rest passed through."""
    from lm_eval.models.openai_completions import LocalCompletionsAPI

    backend = LocalCompletionsAPI(base_url="http://127.0.0.1:1/v1/completions", model="m", tokenizer_backend=None,
                                  tokenized_requests=False, seed=3)  # fmt: skip
    kwargs = gen_kwargs(SamplingParams(temperature=0.5, top_k=4, max_new_tokens=9, stop=("\n",)), seed=11)
    payload = backend._create_payload("hi", generate=True, gen_kwargs=dict(kwargs), seed=3)
    assert payload == {"prompt": "hi", "model": "m", "max_tokens": 9, "temperature": 0.5, "stop": ["\n"],
                       "seed": 11, "top_k": 4}  # fmt: skip


def test_answers_of_different_servers_are_normalised():
    params = SamplingParams(max_new_tokens=8, stop=("###",))
    vllm_like = {"choices": [{"index": 0, "text": "4", "finish_reason": "stop", "stop_reason": None,
                              "token_ids": [19, 2]}],
                 "prompt_token_ids": [5, 6], "usage": {"prompt_tokens": 2, "completion_tokens": 2}}  # fmt: skip
    c = read_choice(vllm_like, "4", params)
    assert (c.finish_reason, c.token_ids, c.prompt_token_ids, c.completion_tokens) == ("eos", [19, 2], [5, 6], 2)
    stopped = {"choices": [{"text": "a", "finish_reason": "stop", "stop_reason": "###"}]}
    assert read_choice(stopped, "a", params).finish_reason == "stop"
    # a stop string the server did not apply is cut here, as our engine cuts it
    leaked = read_choice({"choices": [{"text": "x###y", "finish_reason": "length"}]}, "x###y", params)
    assert (leaked.text, leaked.finish_reason) == ("x", "stop")
    null_content = read_choice({"choices": [{"message": {"content": None}, "finish_reason": "length"}]}, None, params)
    assert (null_content.text, null_content.finish_reason) == ("", "length")
    with pytest.raises(ValueError, match="no choices"):
        read_choice({"error": {"message": "boom"}}, None, params)


@pytest.mark.parametrize("credentials, api_key", [("user:pw-123@", None), ("", "key-456")])
def test_a_dead_port_is_a_recorded_failure_not_an_empty_answer(tiny, credentials, api_key):
    url = f"http://{credentials}127.0.0.1:{free_port()}/v1"
    config = EndpointConfig(url=url, served_model="m", max_retries=1, api_key=api_key)
    assert "pw-123" not in repr(config) and "key-456" not in repr(config)
    engine = EndpointEngine(config, tokenizer=tiny[1])
    seen, put = [], []

    class Sink:
        def put(self, prompt, sampling, output):
            put.append(output)

        def for_replica(self, rank):
            return self

    outs = engine.generate(["a", "b"], SamplingParams(max_new_tokens=4), progress=lambda d, n, s: seen.append(d),
                           sink=Sink())  # fmt: skip
    assert [o.finish_reason for o in outs] == ["error", "error"] and [o.index for o in outs] == [0, 1]
    assert all(o.text == "" and o.token_ids == [] and "connection failed" in o.error for o in outs)
    assert sorted(seen) == [1, 2] and put == []  # progress for each; failures are not persisted
    assert engine.last_stats.num_failed == 2 and engine.last_stats.num_retries == 2
    events = engine.collect_events()
    failed = [e for e in events if e["type"] == "request_failed"]
    assert sorted(e["request_id"] for e in failed) == [0, 1]
    assert all(e["rank"] == 0 and "ts" in e and e["reason"] for e in failed)
    assert [e["type"] for e in events].count("request_retried") == 2
    record = json.dumps([engine.identity.server, engine.identity.config, events, [o.error for o in outs]])
    assert "pw-123" not in record and "key-456" not in record
    assert (
        engine.identity.server["base_url"].startswith("http://127.0.0.1:") and "models_error" in engine.identity.server
    )
    assert engine.identity.kind == "endpoint" and engine.reported_acceptance() is None
    with pytest.raises(UserError, match="generation only"):
        engine.score([([1], [2])])


def test_the_tokenizer_comes_from_the_model_checkpoint():
    engine = EndpointEngine(EndpointConfig(url=f"http://127.0.0.1:{free_port()}", served_model="m", model="tiny"))
    assert engine.identity.config["tokenizer"] == "preset:tiny"
    assert engine.encode("ab") == engine.tokenizer.encode("ab")


def test_a_dead_port_without_a_model_id_is_a_user_error(tiny):
    with pytest.raises(UserError, match="cannot list the models"):
        EndpointEngine(EndpointConfig(url=f"http://127.0.0.1:{free_port()}"), tokenizer=tiny[1])


def test_the_tokenizer_must_be_local():
    with pytest.raises(UserError, match="local tokenizer"):
        EndpointEngine(EndpointConfig(url="http://127.0.0.1:1", served_model="m"))
    with pytest.raises(UserError, match="offline"):
        EndpointEngine(EndpointConfig(url="http://127.0.0.1:1", served_model="m", tokenizer="no-such/tokenizer-x"))


# -------------------------------------------------------------------------------- llama.cpp's server


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    require_llama_cpp()
    with LlamaServer(tmp_path_factory.mktemp("llama")) as server:
        yield server


PROMPTS = ["The capital of France is", "1, 2, 3, 4,", "Write a haiku about the sea:\n"]


@pytest.mark.slow
def test_greedy_generation_through_llama_cpp(llama, smollm2):
    url = llama.url.replace("://", "://ann-u:pw-321@") + "/v1"  # basic-auth credentials, ignored by this server
    engine = EndpointEngine(EndpointConfig(url=url, concurrency=2), tokenizer=smollm2[1])
    assert engine.identity.model == SERVED_MODEL and engine.identity.server["server_header"] == "uvicorn"
    assert engine.identity.server["base_url"] == llama.url and "pw-321" not in json.dumps(engine.identity.config)
    assert engine.identity.server["acceptance_source"] == NOT_REPORTED
    greedy = SamplingParams(max_new_tokens=16)
    outs = engine.generate(PROMPTS, greedy)
    assert [o.index for o in outs] == [0, 1, 2]
    for out, prompt in zip(outs, PROMPTS, strict=True):
        assert out.finish_reason in ("stop", "length") and out.error is None and out.text.strip()
        assert out.token_ids == smollm2[1].encode(out.text, add_special_tokens=False)
        assert out.prompt_token_ids == engine.encode(prompt)
        assert out.stats["token_ids_source"] == "local_tokenizer" and out.stats["num_output_tokens"] <= 16
    assert [o.text for o in engine.generate(PROMPTS, greedy)] == [o.text for o in outs]  # greedy is repeatable
    assert engine.last_stats.num_failed == 0 and engine.last_stats.num_output_tokens > 0
    assert engine.reported_acceptance() is None and engine.last_stats.acceptance is None


@pytest.mark.slow
def test_stop_strings_are_honoured(llama, smollm2):
    engine = EndpointEngine(EndpointConfig(url=llama.url), tokenizer=smollm2[1])
    free = engine.generate([PROMPTS[1]], SamplingParams(max_new_tokens=24))[0].text
    stop = free.split()[2]  # a word the free-running answer reaches
    out = engine.generate([PROMPTS[1]], SamplingParams(max_new_tokens=24, stop=(stop,)))[0]
    assert out.finish_reason == "stop" and out.text == free[: free.find(stop)] and stop not in out.text


@pytest.mark.slow
def test_a_prompt_beyond_the_context_fails_alone(llama, smollm2):
    engine = EndpointEngine(EndpointConfig(url=llama.url, max_retries=2), tokenizer=smollm2[1])
    too_long = "word " * (N_CTX + 50)
    outs = engine.generate([PROMPTS[0], too_long], SamplingParams(max_new_tokens=4))
    assert outs[0].finish_reason in ("stop", "length") and outs[0].text
    assert outs[1].finish_reason == "error" and "HTTP 400" in outs[1].error and "context" in outs[1].error
    assert outs[1].stats["num_retries"] == 0  # a 4xx is not retried
    assert [e["request_id"] for e in engine.collect_events() if e["type"] == "request_failed"] == [1]


@pytest.mark.slow
def test_max_tokens_beyond_the_context_is_clipped_by_llama_cpp(llama, smollm2):
    """llama.cpp shortens max_tokens to what the context leaves (as our engine does): an answer, not an error."""
    engine = EndpointEngine(EndpointConfig(url=llama.url), tokenizer=smollm2[1])
    out = engine.generate([PROMPTS[2]], SamplingParams(max_new_tokens=4 * N_CTX))[0]
    assert out.finish_reason != "error" and out.text
    assert len(out.prompt_token_ids) + out.stats["num_output_tokens"] <= N_CTX


@pytest.mark.slow
def test_chat_endpoint(llama, smollm2):
    engine = EndpointEngine(EndpointConfig(url=llama.url, chat=True), tokenizer=smollm2[1])
    messages = [{"role": "user", "content": "What is 2 + 2? Answer with a number."}]
    out = engine.generate([messages], SamplingParams(max_new_tokens=12))[0]
    assert out.finish_reason in ("stop", "length") and out.text.strip() and out.error is None
    assert engine.identity.config["api"] == "chat"


@pytest.mark.slow
def test_api_key_and_credentials_stay_out_of_the_record(tmp_path, smollm2):
    require_llama_cpp()
    with LlamaServer(tmp_path, api_key="sekret-789") as server:
        engine = EndpointEngine(EndpointConfig(url=server.url, api_key="sekret-789"), tokenizer=smollm2[1])
        assert engine.generate([PROMPTS[0]], SamplingParams(max_new_tokens=4))[0].finish_reason != "error"
        without = EndpointEngine(EndpointConfig(url=server.url, served_model=SERVED_MODEL), tokenizer=smollm2[1])
        denied = without.generate([PROMPTS[0]], SamplingParams(max_new_tokens=4))[0]
        assert denied.finish_reason == "error" and "HTTP 401" in denied.error
        record = json.dumps([engine.identity.server, engine.identity.config, engine.collect_events()])
        assert "sekret" not in record
        assert engine.identity.server["base_url"] == server.url
