"""The endpoint engine: an OpenAI-compatible server driven through lm-eval's own backends.

Fast tests: URLs, configuration, the mapping of our sampling parameters and of servers' answers, and a dead port.
Slow tests: against llama.cpp's real server (tests/llama_server.py) over the embedded SmolLM2 GGUF."""

from __future__ import annotations

import csv
import json
import logging

import pyarrow.parquet as pq
import pytest
from specdec_eval.peers.client.config import EndpointConfig, EndpointURL
from specdec_eval.peers.client.engine import EndpointEngine, _logprobs_name_other_tokens
from specdec_eval.peers.client.requests import gen_kwargs, read_choice
from specdec_eval.peers.profiles import PROFILES, profile_of_server
from specdec_eval.peers.server.metrics import NOT_REPORTED
from specdec_eval.workers.config import SamplingParams

from specdec_eval.errors import UserError

from ...cli_helpers import run_cli
from ...llama_server import N_CTX, SERVED_MODEL, LlamaServer, free_port, require_llama_cpp
from ...serve_helpers import StubServer, completion

# ------------------------------------------------------------------------------------------------- fast


@pytest.mark.parametrize(
    "url, root, public",
    [
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000", "http://127.0.0.1:8000"),
        ("http://127.0.0.1:8000/v1/", "http://127.0.0.1:8000", "http://127.0.0.1:8000"),
        ("http://h:1/v1/chat/completions", "http://h:1", "http://h:1"),
        (
            "https://u:secret@gw.example/team/v1/completions",
            "https://u:secret@gw.example/team",
            "https://gw.example/team",
        ),
    ],
)
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
        ("http://[::1:18801", r"cannot be read \(Invalid IPv6 URL\)"),
        ("http://u:abc@[::1:18801", "cannot be read"),
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
        ({"timeout_s": float("inf")}, r"request timeout must be a number of seconds in \(0, 604800\], got inf"),
        ({"timeout_s": float("nan")}, "got nan"),
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


def test_a_llama_cpp_server_is_told_to_leave_its_own_filters_off_when_sampling():
    """llama-cpp-python (owned_by "me") filters with top_k 40, top_p 0.95, min_p 0.05 and repeat_penalty 1.1 unless
    told otherwise: a sampled request states the neutral values, and the run's own filters win; greedy requests and
    other servers are sent only what differs from the API's defaults."""
    t07 = SamplingParams(temperature=0.7, top_k=20)
    llama = gen_kwargs(t07, seed=1, profile=profile_of_server("me", None))
    assert (llama["top_k"], llama["top_p"], llama["min_p"], llama["repeat_penalty"]) == (20, 1.0, 0.0, 1.0)
    assert gen_kwargs(SamplingParams(temperature=1.0), seed=1, profile=PROFILES["llamacpp"])["top_k"] == 0
    assert "min_p" not in gen_kwargs(t07, seed=1, profile=PROFILES["vllm"]) and "top_p" not in gen_kwargs(t07, seed=1)
    assert "min_p" not in gen_kwargs(SamplingParams(), seed=None, profile=profile_of_server("me", None))


def test_a_vllm_server_is_asked_for_the_answers_own_token_ids():
    """A sampled answer's pieces can re-encode as other tokens (" c" + "up" as " cup": seen on vLLM at T = 1.0),
    so vLLM (owned_by "vllm") is asked for its tokens (`return_token_ids`); a server not known to take the field is
    not sent it (a strict one refuses fields it does not know)."""
    assert gen_kwargs(SamplingParams(), seed=None, profile=PROFILES["vllm"])["return_token_ids"] is True
    assert "return_token_ids" not in gen_kwargs(SamplingParams(), seed=None, profile=profile_of_server("me", None))
    assert "return_token_ids" not in gen_kwargs(SamplingParams(), seed=None)


def test_logprobs_that_name_other_tokens_than_the_texts_encoding_are_no_evidence():
    """Without the server's token ids, records naming ids (" c", "up") that the text re-encodes as one token
    (" cup") would shift every later position: the records are set apart, not judged."""
    records = [[-0.1, [], 216], [-3.57, [], 83], [-2.41, [], 1110], [-0.5, [], 28]]
    why = _logprobs_name_other_tokens(records, [216, 28627, 28])
    assert why is not None and "first differing at token 1" in why and "4 token(s)" in why
    assert _logprobs_name_other_tokens(records, [216, 83, 1110, 28]) is None
    assert _logprobs_name_other_tokens([[-0.1, [], -12345]], [7]) is None  # tokens named by text: nothing to compare
    assert _logprobs_name_other_tokens(None, [7]) is None


def test_lm_eval_builds_the_payload_from_those_kwargs():
    """The payload is lm-eval's own: until -> stop, max_gen_toks -> max_tokens, the rest passed through."""
    from lm_eval.models.openai_completions import LocalCompletionsAPI

    backend = LocalCompletionsAPI(
        base_url="http://127.0.0.1:1/v1/completions",
        model="m",
        tokenizer_backend=None,
        tokenized_requests=False,
        seed=3,
    )
    kwargs = gen_kwargs(SamplingParams(temperature=0.5, top_k=4, max_new_tokens=9, stop=("\n",)), seed=11)
    payload = backend._create_payload("hi", generate=True, gen_kwargs=dict(kwargs), seed=3)
    assert payload == {
        "prompt": "hi",
        "model": "m",
        "max_tokens": 9,
        "temperature": 0.5,
        "stop": ["\n"],
        "seed": 11,
        "top_k": 4,
    }


def test_answers_of_different_servers_are_normalised():
    params = SamplingParams(max_new_tokens=8, stop=("###",))
    vllm_like = {
        "choices": [{"index": 0, "text": "4", "finish_reason": "stop", "stop_reason": None, "token_ids": [19, 2]}],
        "prompt_token_ids": [5, 6],
        "usage": {"prompt_tokens": 2, "completion_tokens": 2},
    }
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

    outs = engine.generate(
        ["a", "b"], SamplingParams(max_new_tokens=4), progress=lambda d, n, s: seen.append(d), sink=Sink()
    )
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


# --- what a misbehaving server sends back --------------------------------------------------------------------------
# A scripted stub on 127.0.0.1 (tests/serve_helpers.py StubServer). The invented question below stands for a GPQA
# question: sealed text that must never reach a record, whatever the server echoes.

QUESTION = "In the invented Quillish tongue, which vowel follows the seventh tone marker?"


def _echo(status: int):
    return lambda body: (status, {"error": {"message": f"cannot take this prompt: {body['prompt']}", "code": status}})


def _outputs_and_record(answer, prompts, retries: int = 0, **config):
    with StubServer(answer) as stub:
        engine = EndpointEngine(EndpointConfig(url=stub.url, max_retries=retries, model="tiny", **config))
        outs = engine.generate(prompts, SamplingParams(max_new_tokens=4))
    return outs, engine.collect_events()


@pytest.mark.parametrize("status", [400, 500])
def test_a_server_error_that_echoes_the_prompt_is_never_recorded(status, caplog):
    caplog.set_level(logging.INFO)
    outs, events = _outputs_and_record(_echo(status), [QUESTION], retries=1 if status == 500 else 0)
    assert "Quillish" not in caplog.text  # nor logged (lm-eval's backend logs a failed request's body)
    out = outs[0]
    assert out.finish_reason == "error" and out.error.startswith(f"HTTP {status} ")
    assert "withheld: it quotes the prompt" in out.error and "sha256" in out.error
    record = json.dumps([o.error for o in outs] + events)
    assert "Quillish" not in record and "vowel follows" not in record.lower()
    kinds = [e["type"] for e in events]
    assert kinds.count("request_failed") == 1 and kinds.count("request_retried") == (status == 500)


def test_a_server_message_that_quotes_nothing_is_kept_on_one_line():
    said = {"error": {"message": "max_tokens must be\nat most 2", "type": "BadRequestError", "code": 400}}
    outs, _ = _outputs_and_record(lambda body: (400, said), [QUESTION])
    assert outs[0].error == "HTTP 400 Bad Request: max_tokens must be at most 2"


@pytest.mark.parametrize("reason", ["aborted", "abort", "error", "cancelled"])
def test_an_answer_the_server_did_not_complete_is_a_failed_request(reason):
    outs, events = _outputs_and_record(lambda body: (200, completion("The answer is (A)", reason)), ["q"])
    assert outs[0].finish_reason == "error" and outs[0].text == ""
    assert f"did not complete the request (finish_reason {reason!r})" in outs[0].error
    assert [e["type"] for e in events] == ["request_failed"]


@pytest.mark.parametrize(
    "body, words",
    [
        (completion(5), "the answer's text is int, not a string"),
        (completion({"a": 1}), "the answer's text is dict"),
        ([completion("4")], "has no choices"),
        ({"choices": "4"}, "the answer has no choices"),
        ({"choices": [{"index": 3, "text": "4"}]}, "the answer's one choice has index 3, not 0"),
        ({"error": {"message": f"failed on {QUESTION}"}}, "no choices: (message withheld: it quotes the prompt"),
    ],
    ids=["text-int", "text-dict", "a-list", "choices-a-string", "index-out-of-range", "error-in-a-200"],
)
def test_an_unreadable_answer_is_a_recorded_failure(body, words):
    outs, events = _outputs_and_record(lambda _: (200, body), [QUESTION, QUESTION])
    assert [o.finish_reason for o in outs] == ["error", "error"]
    assert all(words in o.error and "Quillish" not in o.error for o in outs), outs[0].error
    assert [e["type"] for e in events] == ["request_failed"] * 2


@pytest.mark.parametrize("api_key, served", [(None, None), ("wrong-key", None), ("wrong-key", "m")])
def test_a_refused_api_key_says_pass_it_with_api_key(api_key, served):
    with StubServer(lambda _: (401, {}), models_status=401) as stub, pytest.raises(UserError) as caught:
        EndpointEngine(EndpointConfig(url=stub.url, api_key=api_key, served_model=served, model="tiny"))
    message = str(caught.value)
    assert "HTTP 401 Unauthorized" in message and "--api-key KEY" in message and "\n" not in message
    assert "served model" not in message and "wrong-key" not in message


def test_an_http_status_error_is_one_line():
    with StubServer(lambda _: (500, {}), models_status=500) as stub, pytest.raises(UserError) as caught:
        EndpointEngine(EndpointConfig(url=stub.url, model="tiny"))
    assert "(HTTP 500 Internal Server Error)" in str(caught.value) and "\n" not in str(caught.value)


def _gpqa_data(folder, questions: list[str]):
    (folder / "gpqa").mkdir(parents=True)
    columns = ["Question", "Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3"]
    with open(folder / "gpqa" / "gpqa_diamond.csv", "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(columns)
        writer.writerows([q, "ix", "ox", "ux", "ax"] for q in questions)
    return folder


def test_a_gpqa_run_records_no_echoed_question_and_fails_on_every_broken_answer(tmp_path, capsys):
    """The whole path: `run --endpoint` on (invented) GPQA questions against a server that echoes the prompt in
    its errors, aborts, errs or sends a number for text: every request is a recorded failure, the run FAILs, and no
    question reaches samples.parquet, events.jsonl, the manifest or what was printed."""
    questions = [
        f"Among Quillish glyph pairs, which one marks tone number {i} in the northern dialect?" for i in range(5)
    ]
    behaviours = [
        _echo(400),
        _echo(500),
        lambda b: (200, completion("(A)", "aborted")),
        lambda b: (200, completion("(A)", "error")),
        lambda b: (200, completion(5)),
    ]

    def answer(body):
        number = next(i for i in range(5) if f"tone number {i} " in body["prompt"])
        return behaviours[number](body)

    with StubServer(answer) as stub:
        code, out, err = run_cli(
            capsys,
            "run",
            "--endpoint",
            stub.url,
            "--model",
            "tiny",
            "--tasks",
            "gpqa_diamond",
            "--data-dir",
            str(_gpqa_data(tmp_path / "data", questions)),
            "--no-reference",
            "--request-retries",
            "0",
            "--out",
            str(tmp_path / "runs"),
        )
    assert code == 1 and "5 of 5 requests FAILED" in out, out + err
    (run,) = (tmp_path / "runs").glob("2*")
    errors = pq.read_table(run / "samples.parquet").column("error").to_pylist()
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    assert sorted(e["request_id"] for e in events if e["type"] == "request_failed") == [0, 1, 2, 3, 4]
    assert sum("withheld: it quotes the prompt" in e for e in errors) == 2
    assert sum("finish_reason" in e for e in errors) == 2 and sum("text is int" in e for e in errors) == 1
    written = "".join(f.read_text("utf-8", "replace") for f in run.rglob("*") if f.is_file()) + json.dumps(errors)
    for text in (written, out, err):
        assert "Quillish" not in text and "northern dialect" not in text


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
        # Without the key the run stops before any request: a refused key would fail every one of them alike.
        with pytest.raises(UserError, match="HTTP 401.*pass it with --api-key") as refused:
            EndpointEngine(EndpointConfig(url=server.url, served_model=SERVED_MODEL), tokenizer=smollm2[1])
        assert "sekret" not in str(refused.value)
        record = json.dumps([engine.identity.server, engine.identity.config, engine.collect_events()])
        assert "sekret" not in record
        assert engine.identity.server["base_url"] == server.url


# --- per-sample seeds or none ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode, sends", [("per-sample", True), ("none", False)])
def test_sampled_requests_carry_a_seed_only_when_asked(mode, sends):
    """`--request-seeds none`: sampled requests go out without a seed (production traffic mostly carries none, and
    vLLM's CPU build fails on seeded sampling)."""
    bodies: list[dict] = []

    def answer(body):
        bodies.append(body)
        return 200, completion(" ok", "length")

    with StubServer(answer) as stub:
        engine = EndpointEngine(EndpointConfig(url=stub.url, model="tiny", request_seeds=mode))
        engine.generate(["a", "b"], SamplingParams(max_new_tokens=2, temperature=0.7))
        engine.generate(["c"], SamplingParams(max_new_tokens=2))
    sampled, greedy = bodies[:2], bodies[2]
    if sends:  # each sample its own seed (greedy requests keep lm-eval's fixed one, which decides nothing)
        assert all(isinstance(b["seed"], int) for b in sampled) and sampled[0]["seed"] != sampled[1]["seed"]
    else:  # null, which the API reads as no seed: not even the fixed one lm-eval's backend would send
        assert all(b["seed"] is None for b in [*sampled, greedy])


def test_a_server_that_dies_on_seeded_sampling_is_told_to_run_without_seeds():
    from specdec_eval.peers.server.failure import server_failure_line

    dead = {
        "type": "engine_dead",
        "source": "server_log",
        "fatal": True,
        "line": 9,
        "message": "engine core hit a fatal error: RuntimeError: CPU Generator does not use offset",
    }
    line = server_failure_line([dead])
    assert line.startswith("server: engine core hit a fatal error: RuntimeError: CPU Generator does not use offset")
    assert line.endswith("rerun with --request-seeds none (sampled requests then carry no seed)")
    failed = {"type": "request_failed", "reason": "HTTP 500: Generator does not use offset"}
    assert "--request-seeds none" in server_failure_line([failed])
    assert server_failure_line([{**dead, "message": "engine core hit a fatal error: RuntimeError: boom"}]) == (
        "server: engine core hit a fatal error: RuntimeError: boom, log line 9"
    )


def test_request_seeds_is_a_choice():
    with pytest.raises(UserError, match="unknown request seeds"):
        EndpointConfig(url="http://127.0.0.1:1", request_seeds="sometimes")
