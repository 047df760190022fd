"""OpenAI request bodies (completions and chat) and their conversion into what the engine takes: prompts and one
`SamplingParams`, validated by the engine's own dataclass, so a bad value gets the engine's message as a 400.

Fields we do not implement but that would change the answer (n > 1, penalties, ...) are refused with a 400 rather
than silently ignored; fields that do not change it (user, metadata, ...) are ignored. Log-probabilities are
returned (completions: `logprobs: k`; chat: `logprobs: true` with `top_logprobs: k`), except in a stream.

Scoring a prompt (teacher forcing, what lm-eval's loglikelihood requests and the sampled lossless gate's baseline
ask): completions' `echo: true` returns the prompt before the completion, with its tokens' logprobs in front of the
completion's when `logprobs` is set (the first token's null, as OpenAI's legacy API has it), and `max_tokens: 0`
then generates nothing; vLLM's `prompt_logprobs: k` returns `prompt_logprobs` in the choice, vLLM's shape: per
prompt token null (the first) or {token id: {logprob, rank, decoded_token}} for the token and the top k."""

from __future__ import annotations

import json
import math
import random
import re
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from ..errors import UserError
from ..workers.config import GREEDY_BELOW, MAX_LOGPROBS, SamplingParams
from ..workers.loading.chat_template import ChatTemplateKwargs
from ..workers.loading.tokenizer import encode_chat
from .errors import bad_request

# OpenAI's defaults (not the engine's greedy default): a client that names no temperature samples.
DEFAULT_TEMPERATURE = 1.0
DEFAULT_COMPLETION_TOKENS = 16  # OpenAI's max_tokens default for /v1/completions
COMPLETION_MAX_LOGPROBS = 5  # OpenAI's limit for /v1/completions `logprobs` (chat's top_logprobs: MAX_LOGPROBS, 20)


# Strict types: pydantic's default (lax) mode turns `logprobs: true` into 1, "5" into 5, `temperature: "0.5"` into
# 0.5 and `prompt: [true, false]` or `[1.0, 2.0]` into token ids, where OpenAI's API answers 400. A field gets the
# JSON type it is documented with (an integer where a float is expected is still a number).
STRICT = ConfigDict(extra="ignore", strict=True)
# The chat roles the chat template renders; a tool's answer needs tools, which are refused below.
CHAT_ROLES = ("system", "user", "assistant")


class StreamOptions(BaseModel):
    model_config = STRICT
    include_usage: bool = False


class _Generation(BaseModel):
    """What both endpoints share."""

    model_config = STRICT

    model: str | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None  # vLLM's extension; -1 or 0: off
    seed: int | None = None
    stop: str | list[str] | None = None
    ignore_eos: bool = False  # vLLM's extension
    n: int = 1
    best_of: int | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    # vLLM's extension: logprobs name each token "token_id:N" instead of its text (two tokens can print alike)
    return_tokens_as_token_ids: bool = False

    def refuse_unsupported(self) -> None:
        if self.n != 1:
            raise bad_request(f"n must be 1 (this server returns one choice per prompt), got {self.n}")
        if self.best_of not in (None, 1):
            raise bad_request(f"best_of is not supported, got {self.best_of}")
        for name in ("presence_penalty", "frequency_penalty"):
            if getattr(self, name):
                raise bad_request(f"{name} is not supported")
        if self.logit_bias:
            raise bad_request("logit_bias is not supported")

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


class CompletionRequest(_Generation):
    prompt: str | list[int] | list[str] | list[list[int]]
    echo: bool = False
    logprobs: int | None = None
    prompt_logprobs: int | None = None  # vLLM's extension: the prompt's tokens scored, with the top k of each
    suffix: str | None = None

    def refuse_unsupported(self) -> None:
        super().refuse_unsupported()
        if self.logprobs is not None:
            _check_logprobs(self.logprobs, "logprobs", COMPLETION_MAX_LOGPROBS, self.stream)
        if self.stream and (self.echo or self.prompt_logprobs is not None):
            raise bad_request("echo and prompt_logprobs are not supported in a stream; ask without stream: true")
        if self.prompt_logprobs is not None and not 0 <= self.prompt_logprobs <= MAX_LOGPROBS:
            raise bad_request(f"prompt_logprobs must be in 0..{MAX_LOGPROBS}, got {self.prompt_logprobs}")
        if self.max_tokens == 0 and not self.echo:
            raise bad_request("max_tokens 0 generates nothing: it needs echo: true (scoring the prompt)")
        if self.suffix:
            raise bad_request("suffix is not supported")

    @property
    def prompt_scores_wanted(self) -> int | None:
        """How many top alternatives each prompt token's scoring needs (None: the prompt is not scored)."""
        wanted = [k for k in (self.logprobs if self.echo else None, self.prompt_logprobs) if k is not None]
        return max(wanted) if wanted else None


class ContentPart(BaseModel):
    model_config = STRICT
    type: str
    text: str | None = None


class ChatMessage(BaseModel):
    model_config = STRICT
    role: str
    content: str | list[ContentPart] | None = None

    def as_dict(self) -> dict[str, str]:
        if self.role not in CHAT_ROLES:
            raise bad_request(f"message role must be one of {', '.join(CHAT_ROLES)}, got {self.role[:40]!r}")
        if isinstance(self.content, list):
            if any(part.type != "text" or part.text is None for part in self.content):
                raise bad_request("only text content parts are supported")
            return {"role": self.role, "content": "".join(part.text or "" for part in self.content)}
        return {"role": self.role, "content": self.content or ""}


class ChatRequest(_Generation):
    messages: list[ChatMessage]
    max_completion_tokens: int | None = None  # OpenAI's newer name for max_tokens
    logprobs: bool | None = None
    top_logprobs: int | None = None
    tools: list[Any] | None = None
    # The chat template's extra variables (vLLM's and SGLang's field), and OpenAI's reasoning_effort, which reaches
    # the template as the variable of that name (GPT-OSS's template reads it) unless the kwargs set it themselves.
    chat_template_kwargs: dict[str, Any] | None = None
    reasoning_effort: str | None = None

    def template_kwargs(self) -> ChatTemplateKwargs:
        """The validated template variables (a 400 naming the problem)."""
        merged = dict(self.chat_template_kwargs or {})
        if self.reasoning_effort is not None:
            merged.setdefault("reasoning_effort", self.reasoning_effort)
        try:
            return ChatTemplateKwargs.of(merged, "chat_template_kwargs")
        except UserError as e:
            raise bad_request(str(e)) from None

    def refuse_unsupported(self) -> None:
        super().refuse_unsupported()
        if self.top_logprobs is not None and not self.logprobs:
            raise bad_request("top_logprobs needs logprobs: true")
        if self.logprobs:
            _check_logprobs(self.top_logprobs or 0, "top_logprobs", MAX_LOGPROBS, self.stream)
        if self.tools:
            raise bad_request("tools are not supported")
        if not self.messages:
            raise bad_request("messages must not be empty")


def parse_body(raw: bytes, model: type[BaseModel]) -> Any:
    """JSON bytes -> a request model; malformed JSON or a wrong field is a 400 naming it. Standard JSON only: no
    NaN / Infinity (Python's json reads them; JSON has no such numbers), no text that is not Unicode (a lone UTF-16
    surrogate, which no tokenizer can encode), no nesting deeper than Python's parser can follow."""
    try:
        data = json.loads(raw, parse_constant=_refuse_constant)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise bad_request(f"request body is not valid JSON: {e}") from None
    except RecursionError:
        raise bad_request("request body is nested too deeply") from None
    if not isinstance(data, dict):
        raise bad_request("request body must be a JSON object")
    if _SURROGATE_ESCAPE.search(raw):  # only an escape can carry a surrogate: UTF-8 bytes of one fail to decode
        _refuse_lone_surrogates(data)
    try:
        request = model.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        if first["loc"][:1] == ("prompt",):  # a union: pydantic names the first member's complaint only
            raise bad_request(
                "invalid field 'prompt': a string, a list of strings, a list of token ids (integers) "
                "or a list of such lists"
            ) from None
        where = ".".join(str(p) for p in first["loc"]) or "body"
        raise bad_request(f"invalid field {where!r}: {first['msg']}") from None
    request.refuse_unsupported()
    return request


_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89abcdefABCDEF]")


def _refuse_constant(name: str) -> Any:
    raise bad_request(f"request body is not valid JSON: {name} is not a JSON number")


def _refuse_lone_surrogates(data: Any) -> None:
    """A 400 for any string (key or value) holding a UTF-16 surrogate without its pair. Iterative: the body may nest
    as deep as the JSON parser allowed."""
    stack = [data]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(v for v in value if not isinstance(v, int | float))
        elif isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as e:
                where = f"U+{ord(value[e.start]):04X}"
                raise bad_request(
                    f"request body holds a lone surrogate ({where}), which is not Unicode text; send "
                    "the character's UTF-8 or its surrogate pair"
                ) from None


@dataclass(frozen=True)
class EngineInput:
    """One HTTP request as the engine takes it: one prompt per choice and one set of sampling parameters.
    `default_max_tokens`: the client named no limit, so the engine loop sets it to what the context leaves."""

    prompts: list[str | list[int] | list[dict[str, str]]]
    sampling: SamplingParams
    default_max_tokens: bool = False
    score_prompt: int | None = None  # score each prompt by teacher forcing, with this many top alternatives
    generate: bool = True  # False: max_tokens 0 with echo, the prompt's scoring only


def completion_input(request: CompletionRequest, vocab_size: int) -> EngineInput:
    prompt = request.prompt
    if isinstance(prompt, str) or (prompt and isinstance(prompt[0], int)):
        prompts: list = [prompt]
    else:
        prompts = list(prompt)
    if not prompts:
        raise bad_request("prompt must not be empty")
    for p in prompts:
        if isinstance(p, list):
            _check_token_ids(p, vocab_size)
    max_tokens = DEFAULT_COMPLETION_TOKENS if request.max_tokens is None else request.max_tokens
    generate = max_tokens > 0
    sampling = sampling_params(request, max_tokens if generate else 1, request.logprobs)
    return EngineInput(prompts, sampling, score_prompt=request.prompt_scores_wanted, generate=generate)


def chat_input(request: ChatRequest, tokenizer: Any = None) -> EngineInput:
    """With template variables the conversation is rendered here (token ids go to the engine); without, the engine
    renders it with the template's defaults."""
    limit = request.max_completion_tokens if request.max_completion_tokens is not None else request.max_tokens
    messages: Any = [m.as_dict() for m in request.messages]
    template_kwargs = request.template_kwargs()
    if template_kwargs and tokenizer is not None:
        try:
            messages = encode_chat(tokenizer, messages, template_kwargs)
        except UserError as e:  # no chat template
            raise bad_request(str(e)) from None
        except Exception as e:  # a template that raises on these variables (e.g. its own raise_exception)
            raise bad_request(
                f"the chat template cannot render these chat_template_kwargs: {type(e).__name__}: {e}"
            ) from None
    # No limit named: the rest of the context (set by the engine loop once the prompt is tokenized).
    placeholder = 1 if limit is None else limit
    logprobs = (request.top_logprobs or 0) if request.logprobs else None
    return EngineInput([messages], sampling_params(request, placeholder, logprobs), default_max_tokens=limit is None)


def _check_logprobs(k: int, name: str, most: int, stream: bool) -> None:
    if stream:
        raise bad_request("logprobs are not supported in a stream; ask without stream: true")
    if not 0 <= k <= most:
        raise bad_request(f"{name} must be in 0..{most}, got {k}")


def sampling_params(request: _Generation, max_tokens: int, logprobs: int | None = None) -> SamplingParams:
    temperature = DEFAULT_TEMPERATURE if request.temperature is None else request.temperature
    if not (math.isfinite(temperature) and temperature >= 0):  # 1e400 reads as inf
        raise bad_request(f"temperature must be >= 0 and finite, got {temperature}")
    if temperature < GREEDY_BELOW:
        temperature = 0.0
    top_k = 0 if request.top_k in (None, -1) else request.top_k
    stop = (request.stop,) if isinstance(request.stop, str) else tuple(request.stop or ())
    seed = request.seed
    if seed is not None and not -(2**63) <= seed < 2**63:
        raise bad_request(f"seed must fit in 64 signed bits, got {seed}")
    if seed is None and temperature > 0:
        seed = random.SystemRandom().getrandbits(63)  # no seed asked for: a fresh sample, as OpenAI's API gives
    try:
        return SamplingParams(
            max_new_tokens=max_tokens,
            temperature=temperature,
            top_p=1.0 if request.top_p is None else request.top_p,
            top_k=top_k,
            stop=tuple(s for s in stop if s),
            ignore_eos=request.ignore_eos,
            seed=seed,
            logprobs=logprobs,
        )
    except UserError as e:
        raise bad_request(str(e)) from None


def _check_token_ids(ids: list[int], vocab_size: int) -> None:
    bad = next((t for t in ids if not 0 <= t < vocab_size), None)
    if bad is not None:
        raise bad_request(f"token id {bad} is outside the vocabulary (0..{vocab_size - 1})")
