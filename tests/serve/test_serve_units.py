"""The server's pure parts: streamed text that adds up to the final answer, request fields into SamplingParams, and
the Prometheus exposition of the spec-decode counters as peers/server/metric_formats.py reads it."""

from __future__ import annotations

import json

import pytest
from specdec_eval.peers.server.metric_formats import parse_prometheus
from specdec_eval.serve.errors import ApiError
from specdec_eval.serve.logprobs import text_offsets, token_bytes
from specdec_eval.serve.metrics import ServerMetrics
from specdec_eval.serve.schemas import ChatRequest, CompletionRequest, chat_input, completion_input, parse_body
from specdec_eval.serve.streaming import TextStream, _safe_prefix
from specdec_eval.workers.loading.presets import tiny_tokenizer
from specdec_eval.workers.spec.metrics import AcceptanceStats


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()  # byte-level: a multi-byte character takes several tokens


def test_streamed_pieces_add_up_and_never_split_a_character(tok):
    text = "héllo wörld, 3 € ✓ — done"
    ids = tok.encode(text, add_special_tokens=False)
    assert len(ids) > len(text)  # é, ö, €, ✓, — are 2-3 tokens each
    stream = TextStream(tok)
    pieces = [stream.add([t]) for t in ids]
    assert all("\ufffd" not in p for p in pieces)
    assert "".join(pieces) + stream.finish(text) == text


def test_a_possible_stop_string_is_held_back_until_it_is_settled(tok):
    stream = TextStream(tok, stop=("\n\n", "END"))
    assert stream.add(tok.encode("ab\n", add_special_tokens=False)) == "ab"  # "\n" may begin "\n\n"
    assert stream.add(tok.encode("c", add_special_tokens=False)) == "\nc"
    assert stream.add(tok.encode("EN", add_special_tokens=False)) == ""
    assert stream.finish("ab\nc") == ""  # the engine stopped at "END": nothing of it was sent
    assert _safe_prefix("x END y", ("END",)) == "x "
    assert _safe_prefix("xE", ("END", "Ex")) == "x"


def test_completion_fields_become_sampling_params():
    req = parse_body(b'{"prompt": "hi", "stop": "##", "top_k": -1, "seed": 5}', CompletionRequest)
    engine_input = completion_input(req, vocab_size=320)
    s = engine_input.sampling
    assert engine_input.prompts == ["hi"] and not engine_input.default_max_tokens
    # OpenAI's defaults: 16 tokens, temperature 1
    assert (s.max_new_tokens, s.temperature, s.top_k, s.stop, s.seed) == (16, 1.0, 0, ("##",), 5)
    assert completion_input(parse_body(b'{"prompt": [[1, 2], [3]]}', CompletionRequest), 320).prompts == [[1, 2], [3]]
    unseeded = completion_input(parse_body(b'{"prompt": "a"}', CompletionRequest), 320).sampling
    assert unseeded.seed is not None  # a fresh sample per request, not the engine's one default seed
    greedy = completion_input(parse_body(b'{"prompt": "a", "temperature": 0}', CompletionRequest), 320).sampling
    assert greedy.greedy and greedy.seed is None


def test_chat_fields_and_default_length():
    body = (
        b'{"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]}'
    )
    engine_input = chat_input(parse_body(body, ChatRequest))
    assert engine_input.prompts == [[{"role": "user", "content": "ab"}]] and engine_input.default_max_tokens
    limited = chat_input(
        parse_body(b'{"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 7}', ChatRequest)
    )
    assert limited.sampling.max_new_tokens == 7 and not limited.default_max_tokens


@pytest.mark.parametrize(
    "body, words",
    [
        (b"{nope", "not valid JSON"),
        (b'"a string"', "JSON object"),
        (b'{"prompt": "a", "temperature": -1}', "temperature must be >= 0"),
        (b'{"prompt": "a", "top_p": 2}', "top-p must be in (0, 1]"),
        (b'{"prompt": "a", "n": 3}', "n must be 1"),
        (b'{"prompt": "a", "echo": true, "stream": true}', "not supported in a stream"),
        (b'{"prompt": "a", "prompt_logprobs": 21}', "prompt_logprobs must be in 0..20"),
        (b'{"prompt": "a", "max_tokens": 0}', "needs echo: true"),
        (b'{"prompt": "a", "seed": 99999999999999999999}', "64 signed bits"),
        (b'{"prompt": "a", "max_tokens": "many"}', "max_tokens"),
        (b'{"prompt": [5, 400]}', "outside the vocabulary"),
        # JSON types as OpenAI's API documents them: never coerced (a lax parser read true as 1, "5" as 5)
        (b'{"prompt": "a", "logprobs": true}', "invalid field 'logprobs': Input should be a valid integer"),
        (b'{"prompt": "a", "logprobs": "5"}', "invalid field 'logprobs': Input should be a valid integer"),
        (b'{"prompt": "a", "temperature": "0.5"}', "invalid field 'temperature': Input should be a valid number"),
        (b'{"prompt": [true, false]}', "invalid field 'prompt': a string, a list of strings, a list of token ids"),
        (b'{"prompt": [1.0, 2.0]}', "invalid field 'prompt'"),
        (b'{"prompt": "a", "ignore_eos": "yes"}', "invalid field 'ignore_eos'"),
    ],
)
def test_bad_fields_are_400s_that_name_the_problem(body, words):
    with pytest.raises(ApiError) as caught:
        completion_input(parse_body(body, CompletionRequest), vocab_size=320)
    assert caught.value.status == 400 and words in caught.value.message


@pytest.mark.parametrize(
    "message, words",
    [
        ({"role": "wizard", "content": "x"}, "message role must be one of system, user, assistant, got 'wizard'"),
        ({"role": "tool", "content": "x"}, "got 'tool'"),
        ({"role": 1, "content": "x"}, "invalid field 'messages.0.role'"),
    ],
)
def test_bad_chat_messages_are_400s(message, words):
    body = json.dumps({"messages": [message]}).encode()
    with pytest.raises(ApiError) as caught:
        chat_input(parse_body(body, ChatRequest))
    assert caught.value.status == 400 and words in caught.value.message


def test_numbers_keep_their_json_types():
    """An integer is still a number where a float is asked for (temperature 0, not 0.0, is what clients send)."""
    sampling = completion_input(parse_body(b'{"prompt": "a", "temperature": 0, "top_p": 1}', CompletionRequest), 320)
    assert sampling.sampling.greedy
    chat = parse_body(
        b'{"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}], '
        b'"logprobs": true, "top_logprobs": 2}',
        ChatRequest,
    )
    assert chat_input(chat).sampling.logprobs == 2


@pytest.mark.parametrize("temperature, greedy", [(0, True), (1e-40, True), (9.9e-6, True), (1e-5, False), (0.7, False)])
def test_temperatures_below_1e_5_decode_greedily(temperature, greedy):
    """The rule (workers.config.GREEDY_BELOW): a temperature in (0, 1e-5) is temperature 0, as vLLM's; greedy takes no
    seed."""
    body = f'{{"prompt": "a", "temperature": {temperature!r}}}'.encode()
    sampling = completion_input(parse_body(body, CompletionRequest), vocab_size=320).sampling
    assert sampling.greedy is greedy and (sampling.seed is None) is greedy
    assert sampling.temperature == (0.0 if greedy else temperature)


def test_spec_decode_counters_read_back_as_vllm_names():
    metrics = ServerMetrics("served", spec_decoding=True)
    early = AcceptanceStats(3, 10, 30, 12, [6, 4, 2])
    late = AcceptanceStats(3, 110, 330, 192, [86, 64, 42])
    for stats in (early, late):  # cumulative engine counters: the exported ones follow them
        metrics._sync_acceptance(stats.to_dict())
    text = metrics.render().decode()
    assert 'vllm:spec_decode_num_drafts_total{model_name="served"} 110.0' in text
    counters = parse_prometheus(text, model="served")
    assert (counters.cycles, counters.draft_tokens, counters.accepted) == (110, 330, 192)
    assert counters.accepted_per_pos == {0: 86, 1: 64, 2: 42}
    assert parse_prometheus(ServerMetrics("served", spec_decoding=False).render().decode()) is None


def test_text_offsets_stay_inside_the_text(tok):
    """Each token's offset is where its text starts in the completion (a character over several byte tokens counted
    once, at the token that completes it); special tokens, left out of the text, add nothing, so an answer that ends
    in one has no offset past its end (they pointed past it, counting each special token's own name)."""
    text = "é ok"
    ids = tok.encode(text, add_special_tokens=False)  # 'é' is two byte tokens
    special = tok.all_special_ids[:2]
    offsets = text_offsets(tok, [*ids, *special], len(text))
    assert offsets[:2] == [0, 0] and offsets[2] == 1  # the second byte completes 'é'; ' ok' starts at 1
    assert offsets[-len(special) :] == [len(text)] * len(special) and max(offsets) <= len(text)
    assert text_offsets(tok, ids, 2)[-1] <= 2  # a stop string cut from the text keeps its tokens: clamped


def test_chat_bytes_are_the_tokens_own(tok):
    """A byte-level token that is part of a character decodes alone to U+FFFD; its `bytes` are still its own byte,
    so the pieces of a character add up to its UTF-8."""
    ids = tok.encode("é", add_special_tokens=False)
    assert [token_bytes(tok, t) for t in ids] == [b"\xc3", b"\xa9"]
    assert token_bytes(tok, tok.encode("a", add_special_tokens=False)[0]) == b"a"
