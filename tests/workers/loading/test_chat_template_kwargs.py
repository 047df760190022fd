"""Chat-template kwargs: a JSON object checked in one line; rendered into our engine's chat template as Jinja
variables (Hugging Face apply_chat_template(**kwargs)); named when the template never reads them; sent as
`chat_template_kwargs` (and a reasoning_effort as OpenAI's own field) in an endpoint's chat requests, through
lm-eval's payload; taken by our server's chat endpoint."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
from lm_eval.models.openai_completions import LocalChatCompletion, LocalCompletionsAPI
from specdec_eval.peers.client.config import EndpointConfig
from specdec_eval.peers.client.requests import gen_kwargs
from specdec_eval.serve.errors import ApiError
from specdec_eval.serve.schemas import ChatRequest, chat_input, parse_body
from specdec_eval.workers.config import SamplingParams
from specdec_eval.workers.loading.chat_template import (
    ChatTemplateKwargs,
    render_chat,
    template_variables,
    unread_kwargs,
)
from specdec_eval.workers.loading.presets import tiny_tokenizer
from specdec_eval.workers.loading.tokenizer import encode_any, encode_chat

from specdec_eval.errors import UserError

MEDIUM = ChatTemplateKwargs.parse('{"reasoning_effort": "medium"}')
MESSAGES = [{"role": "user", "content": "What is 2 + 2?"}]
# A template that reads a variable, as GPT-OSS's reads reasoning_effort and Qwen3's enable_thinking
EFFORT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if reasoning_effort is defined %}<|im_start|>system\nReasoning: {{ reasoning_effort }}<|im_end|>\n{% endif %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.fixture(autouse=True)
def _collect_engines():
    """Overrides conftest's per-test gc.collect: no engines are built here."""
    yield


@pytest.fixture(scope="module")
def tok():
    t = copy.deepcopy(tiny_tokenizer())
    t.chat_template = EFFORT_TEMPLATE
    return t


def test_parse_keeps_a_canonical_hashable_value():
    kw = ChatTemplateKwargs.parse('{ "reasoning_effort" : "medium", "enable_thinking": false, "n": [1, {"a": null}]}')
    assert kw.json == '{"enable_thinking":false,"n":[1,{"a":null}],"reasoning_effort":"medium"}'
    assert kw == ChatTemplateKwargs.of(kw.as_dict()) and hash(kw) == hash(ChatTemplateKwargs.of(kw.as_dict()))
    assert (
        not ChatTemplateKwargs.parse("{}")
        and not ChatTemplateKwargs()
        and ChatTemplateKwargs.of(None) == ChatTemplateKwargs()
    )
    d = kw.as_dict()
    d["reasoning_effort"] = "high"
    assert kw.as_dict()["reasoning_effort"] == "medium"  # a payload's copy cannot change the value


BAD = {
    "reasoning_effort=medium": "not JSON",
    "{'reasoning_effort': 'medium'}": "not JSON",
    '["reasoning_effort", "medium"]': "must be a JSON object",
    '"medium"': "must be a JSON object",
    "null": "must be a JSON object",
    '{"x": NaN}': "NaN is not a JSON number",
    '{"x": Infinity}': "Infinity is not a JSON number",
    '{"reasoning-effort": "medium"}': "is not a template variable name",
    '{"": 1}': "is not a template variable name",
    '{"for": 1}': "is not a template variable name",
    '{"messages": []}': "set by the chat template call itself",
    '{"add_generation_prompt": false}': "set by the chat template call itself",
    '{"bos_token": "x"}': "set by the chat template call itself",
    '{"a": "' + "x" * 17_000 + '"}': "characters; at most",
    '{"a": ' + "[" * 5000 + "]" * 5000 + "}": "nested too deeply",
}


@pytest.mark.parametrize("text", BAD, ids=range(len(BAD)))
def test_every_bad_value_is_one_user_error(text):
    with pytest.raises(UserError) as info:
        ChatTemplateKwargs.parse(text)
    assert BAD[text] in str(info.value) and "\n" not in str(info.value)
    assert str(info.value).startswith("--chat-template-kwargs: ")


def test_rendered_as_jinja_variables(tok):
    plain = render_chat(tok, MESSAGES)
    medium = render_chat(tok, MESSAGES, template_kwargs=MEDIUM)
    assert "Reasoning" not in plain and "Reasoning: medium<|im_end|>" in medium
    assert medium.endswith("<|im_start|>assistant\n")
    assert encode_chat(tok, MESSAGES, MEDIUM) == tok.encode(medium, add_special_tokens=False)
    assert encode_any(tok, MESSAGES, MEDIUM) != encode_any(tok, MESSAGES)
    assert encode_any(tok, "plain text", MEDIUM) == encode_any(tok, "plain text")  # only chat prompts have a template
    continued = render_chat(tok, [*MESSAGES, {"role": "assistant", "content": "It is"}], add_generation_prompt=False)
    assert continued.rstrip().endswith("It is<|im_end|>") or continued.endswith("It is")


def test_a_kwarg_the_template_never_reads_is_named(tok):
    assert "reasoning_effort" in template_variables(tok)
    assert unread_kwargs(tok, MEDIUM) == []
    stock = tiny_tokenizer()  # a ChatML template with no variables of its own
    assert unread_kwargs(stock, ChatTemplateKwargs.parse('{"reasoning_effort": "medium", "x": 1}')) == [
        "reasoning_effort",
        "x",
    ]
    assert unread_kwargs(stock, ChatTemplateKwargs()) == []


def test_endpoint_chat_requests_carry_them_and_completions_do_not():
    params = SamplingParams(max_new_tokens=8, temperature=1.0, seed=3)
    chat = gen_kwargs(params, 3, chat=True, template_kwargs=MEDIUM)
    assert chat["chat_template_kwargs"] == {"reasoning_effort": "medium"} and chat["reasoning_effort"] == "medium"
    thinking = gen_kwargs(params, 3, chat=True, template_kwargs=ChatTemplateKwargs.parse('{"enable_thinking": true}'))
    assert thinking["chat_template_kwargs"] == {"enable_thinking": True} and "reasoning_effort" not in thinking
    completions = gen_kwargs(params, 3, chat=False, template_kwargs=MEDIUM)  # text already rendered locally
    assert "chat_template_kwargs" not in completions and "reasoning_effort" not in completions
    assert "chat_template_kwargs" not in gen_kwargs(params, 3, chat=True)
    # lm-eval's own chat payload passes them through unchanged
    payload = LocalChatCompletion._create_payload(
        SimpleNamespace(model="m", _max_gen_toks=256), MESSAGES, generate=True, gen_kwargs=dict(chat)
    )
    assert payload["chat_template_kwargs"] == {"reasoning_effort": "medium"} and payload["reasoning_effort"] == "medium"
    assert payload["temperature"] == 1.0 and payload["messages"] == MESSAGES
    assert LocalCompletionsAPI  # the completions backend sends rendered text: nothing to add there


def test_endpoint_config_records_them():
    config = EndpointConfig(url="http://127.0.0.1:9", chat=True, chat_template_kwargs=MEDIUM)
    assert config.chat_template_kwargs == MEDIUM and "reasoning_effort" in repr(config)


def test_server_renders_them(tok):
    body = (
        b'{"messages": [{"role": "user", "content": "What is 2 + 2?"}], '
        b'"chat_template_kwargs": {"reasoning_effort": "medium"}}'
    )
    engine_input = chat_input(parse_body(body, ChatRequest), tok)
    assert engine_input.prompts == [encode_chat(tok, MESSAGES, MEDIUM)]
    effort = b'{"messages": [{"role": "user", "content": "What is 2 + 2?"}], "reasoning_effort": "medium"}'
    assert chat_input(parse_body(effort, ChatRequest), tok).prompts == engine_input.prompts  # OpenAI's own field
    plain = b'{"messages": [{"role": "user", "content": "What is 2 + 2?"}]}'
    assert chat_input(parse_body(plain, ChatRequest), tok).prompts == [MESSAGES]  # rendered by the engine, as before
    for bad in (
        b'"chat_template_kwargs": {"messages": []}',
        b'"chat_template_kwargs": {"a-b": 1}',
        b'"chat_template_kwargs": [1]',
    ):
        raw = b'{"messages": [{"role": "user", "content": "x"}], ' + bad + b"}"
        with pytest.raises(ApiError) as info:
            chat_input(parse_body(raw, ChatRequest), tok)
        assert info.value.status == 400
