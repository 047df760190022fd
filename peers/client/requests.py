"""One request to an OpenAI-compatible server, through lm-eval's own backend: our prompt and SamplingParams in,
the server's answer (or the reason there is none) out. No HTTP client of ours: the backend's `model_call` builds
the payload (`_create_payload`), sends it with its auth header and timeout, and `parse_generations` reads it.

A reason recorded for a failed request (samples' `error`, `request_failed` / `request_retried` events, printed
messages) never holds a server's text that quotes the prompt: servers echo their input in error messages (a 400
that repeats the prompt), and a GPQA question must never reach the disk. See `server_message`."""

from __future__ import annotations

import hashlib
import json
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...workers.config import SamplingParams
from ...workers.loading.chat_template import ChatTemplateKwargs
from ..profiles import EngineProfile

# HTTP statuses worth another attempt: the server may answer next time (overload, gateway, rate limit).
TRANSIENT_STATUSES = {408, 425, 429, 500, 502, 503, 504}
MAX_ERROR_CHARS = 500
MAX_SERVER_MESSAGE_CHARS = 200
# A server's message quotes the prompt when it shares this many letters and digits in a row with it (case, spaces,
# punctuation and escapes ignored): long enough that ordinary words of an error message ("maximum context length")
# do not trip it, short enough that any echo of a sentence does, escaped or cut.
ECHO_WINDOW = 12
# finish reasons of an answer the server did not complete: a failed request, never an answer to score
FAILED_FINISH_REASONS = {"abort", "aborted", "cancelled", "canceled", "error", "timeout"}


def gen_kwargs(
    params: SamplingParams,
    seed: int | None,
    chat: bool = False,
    token_ids: bool = False,
    template_kwargs: ChatTemplateKwargs | None = None,
    profile: EngineProfile | None = None,
) -> dict[str, Any]:
    """lm-eval's generation kwargs for one request: `until` and `max_gen_toks` are lm-eval's names (it turns them
    into `stop` and `max_tokens`); the others pass through into the payload unchanged. Only what differs from the
    API's defaults is sent, so a server that lacks an extension (top_k, ignore_eos) is not asked for it, except to
    a server whose own defaults filter a sampled request: its `profile`'s neutral values of those filters are stated
    (each filter the run did not set), so it samples from the distribution the run asked for, the one the sampled
    lossless gate judges. The other servers' defaults are neutral already, and a strict one refuses a field it does
    not know (SGLang also refuses top_k 0).
    Log-probabilities (params.logprobs) in the API's own shape: `logprobs: k` for completions, `logprobs: true`
    with `top_logprobs: k` for chat; `token_ids`: also vLLM's `return_tokens_as_token_ids` (only for a server known
    to take it: a strict one refuses fields it does not know). A server whose profile returns them (vLLM) is also
    asked for the answer's token ids (`return_token_ids`): a sampled answer's pieces (" c" + "up") re-encode as
    other tokens (" cup").

    template_kwargs (chat requests only: a completions request carries text already rendered): the server renders
    its chat template with them; vLLM, SGLang and trtllm-serve take the field `chat_template_kwargs`. A
    `reasoning_effort` among them is also sent as OpenAI's own top-level `reasoning_effort`: trtllm-serve renders
    GPT-OSS through its Harmony adapter from that field, whose default there is "low"
    (its ChatCompletionRequest), not from the template kwargs."""
    kwargs: dict[str, Any] = {
        "until": list(params.stop),
        "max_gen_toks": params.max_new_tokens,
        "temperature": params.temperature,
    }
    if not params.greedy:
        kwargs.update(profile.neutral_sampling if profile is not None else {})
        if params.top_p < 1.0:
            kwargs["top_p"] = params.top_p
        if params.top_k > 0:
            kwargs["top_k"] = params.top_k
        if seed is not None:
            kwargs["seed"] = seed  # overrides the backend's one seed for all requests
    if params.ignore_eos:
        kwargs["ignore_eos"] = True  # vLLM / SGLang / TensorRT-LLM extension
    if profile is not None and profile.returns_token_ids:
        kwargs["return_token_ids"] = True  # the answer's own token ids: re-encoding its text can merge pieces
    if params.logprobs is not None:
        kwargs.update({"logprobs": True, "top_logprobs": params.logprobs} if chat else {"logprobs": params.logprobs})
        if token_ids:
            kwargs["return_tokens_as_token_ids"] = True
    if chat and template_kwargs:
        kwargs["chat_template_kwargs"] = template_kwargs.as_dict()
        effort = kwargs["chat_template_kwargs"].get("reasoning_effort")
        if isinstance(effort, str):
            kwargs["reasoning_effort"] = effort
    return kwargs


def chat_message_str(messages: Sequence[dict[str, str]]) -> Any:
    """lm-eval's wrapper for chat messages (JsonChatStr): its backend decodes it back into the `messages` field."""
    from lm_eval.models.api_models import JsonChatStr

    return JsonChatStr(json.dumps(list(messages), ensure_ascii=False))


@dataclass
class Answer:
    """What one request produced: the server's response JSON, or `error` when there is none."""

    response: dict[str, Any] | None
    error: str | None = None
    attempts: int = 1
    latency_s: float = 0.0
    retry_reasons: list[str] = field(default_factory=list)


def is_transient(exc: BaseException) -> bool:
    import requests

    if isinstance(exc, requests.HTTPError):
        return exc.response is not None and exc.response.status_code in TRANSIENT_STATUSES
    return isinstance(exc, requests.ConnectionError | requests.Timeout)


def describe_error(exc: BaseException, secrets: Sequence[str] = (), prompt: str = "") -> str:
    """One line: the HTTP status with the server's own message (withheld when it quotes `prompt`), or the client-side
    failure."""
    import requests

    if isinstance(exc, requests.HTTPError) and exc.response is not None:
        response = exc.response
        text = f"HTTP {response.status_code} {response.reason or ''}".rstrip()
        text += f": {server_message(response.content, prompt) or '(no message)'}"
    elif isinstance(exc, requests.Timeout):
        text = f"timed out: {exc}"
    elif isinstance(exc, requests.ConnectionError):
        text = f"connection failed: {exc}"
    else:
        text = f"{type(exc).__name__}: {exc}"
        if quotes_prompt(text, prompt):
            text = f"{type(exc).__name__} (its message is withheld: it quotes the prompt)"
    for secret in secrets:
        text = text.replace(secret, "***")
    return " ".join(text.split())[: 2 * MAX_ERROR_CHARS]


def server_message(body: bytes | Any, prompt: str = "") -> str:
    """What a record may keep of a server's error body: its message (OpenAI's `error.message`, FastAPI's `detail`,
    vLLM's `message`, or a body that is not JSON), on one line and cut to MAX_SERVER_MESSAGE_CHARS; when that quotes
    the prompt, only the body's size and hash (enough to find it in the server's log); "" when it has no message.
    `body`: raw bytes, or the JSON already read."""
    raw = body if isinstance(body, bytes) else json.dumps(body, sort_keys=True, default=str).encode()
    data = body
    if isinstance(body, bytes):
        try:
            data = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            data = body.decode("utf-8", "replace")
    message = _message_of(data)
    message = " ".join(message.split())[:MAX_SERVER_MESSAGE_CHARS]
    if quotes_prompt(message, prompt):
        digest = hashlib.sha256(raw).hexdigest()[:16]
        return f"(message withheld: it quotes the prompt; body {len(raw)} bytes, sha256 {digest})"
    return message


def _message_of(data: Any) -> str:
    if isinstance(data, dict):
        error = data.get("error")
        for value in (
            error.get("message") if isinstance(error, dict) else error,
            data.get("detail"),
            data.get("message"),
        ):
            if isinstance(value, str) and value.strip():
                return value
        return ""
    return data if isinstance(data, str) else ""


def _letters(text: str) -> str:
    """Letters and digits only, case-folded: an echo still matches when the server escaped, re-spaced or
    re-cased it."""
    return "".join(c for c in unicodedata.normalize("NFKC", text).casefold() if c.isalnum())


def quotes_prompt(text: str, prompt: str) -> bool:
    """Whether `text` repeats a piece of `prompt` (ECHO_WINDOW letters and digits in a row). A prompt shorter than
    that holds nothing worth hiding, and would be found in any text."""
    p, t = _letters(prompt), _letters(text)
    if len(p) < ECHO_WINDOW or len(t) < ECHO_WINDOW:
        return False
    windows = {p[i : i + ECHO_WINDOW] for i in range(len(p) - ECHO_WINDOW + 1)}
    return any(t[i : i + ECHO_WINDOW] in windows for i in range(len(t) - ECHO_WINDOW + 1))


class SentPrompts:
    """The prompts a run has sent, to keep a server's log line that quotes one off the disk (a server may log a
    request's text, or an error that echoes it). Kept as their letters' ECHO_WINDOW-long pieces at every
    ECHO_WINDOW-th position: a line that repeats 2 x ECHO_WINDOW - 1 letters or more of a prompt in a row holds one of
    them whole, wherever the echo starts (shorter echoes go unseen here: `quotes_prompt` catches those in one known
    prompt). The few-shot examples every prompt shares are kept once."""

    def __init__(self) -> None:
        self._pieces: set[str] = set()

    def add(self, prompt: str) -> None:
        letters = _letters(prompt)
        self._pieces.update(letters[i : i + ECHO_WINDOW] for i in range(0, len(letters) - ECHO_WINDOW + 1, ECHO_WINDOW))

    def quoted_in(self, text: str) -> bool:
        t = _letters(text)
        return any(t[i : i + ECHO_WINDOW] in self._pieces for i in range(len(t) - ECHO_WINDOW + 1))

    def withhold(self, line: str) -> str:
        """`line`, or what a record may keep of it when it quotes a prompt: its length and hash."""
        if not self._pieces or not self.quoted_in(line):
            return line
        digest = hashlib.sha256(line.encode()).hexdigest()[:16]
        return f"(line withheld: it quotes a prompt; {len(line)} chars, sha256 {digest})"


def call_with_retries(
    send: Callable[[], dict[str, Any] | None],
    max_retries: int,
    on_retry: Callable[[int, str], None],
    secrets: Sequence[str] = (),
    prompt: str = "",
) -> Answer:
    """lm-eval's retry policy (tenacity, exponential wait 1..10 s), per request and only for transient failures;
    the last failure becomes `Answer.error` instead of an exception that would lose the other requests."""
    import time

    from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

    answer = Answer(response=None)
    start = time.perf_counter()

    def before_sleep(state) -> None:
        reason = describe_error(state.outcome.exception(), secrets, prompt)
        answer.retry_reasons.append(reason)
        on_retry(state.attempt_number, reason)

    retrying = Retrying(
        stop=stop_after_attempt(max_retries + 1),
        wait=wait_exponential(multiplier=0.5, min=1, max=10),
        retry=retry_if_exception(is_transient),
        before_sleep=before_sleep,
        reraise=True,
    )
    try:
        answer.response = retrying(send)
        if answer.response is None:
            answer.error = "the server gave no response"
    except Exception as exc:  # every failure of one request is that request's error, never the whole run's
        answer.error = describe_error(exc, secrets, prompt)
    answer.attempts = 1 + len(answer.retry_reasons)
    answer.latency_s = time.perf_counter() - start
    return answer


@dataclass
class Choice:
    """The parts of an answer we keep, normalised across servers."""

    text: str
    finish_reason: str
    token_ids: list[int] | None  # only when the server returns them (vLLM's `token_ids`)
    prompt_token_ids: list[int] | None
    completion_tokens: int | None  # the server's usage count
    prompt_tokens: int | None
    logprobs: list[list] | None = None  # asked for: per token [logprob, alternatives, key] (`client.logprobs`)
    logprobs_problem: str | None = None  # the server sent logprobs that cannot be evidence: why (then logprobs None)


def one_choice(response: Any) -> dict[str, Any]:
    """The one choice of an answer to a request for one completion (n = 1); ValueError when there is none, or
    several (extra, duplicated or out of order: lm-eval's parser takes the text by `index` while ids and logprobs
    would come from the first in the list, mixing two answers into one), or its index is not 0."""
    choices = response.get("choices") if isinstance(response, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ValueError("the answer has no choices")  # no body text here: the caller adds what is safe of it
    if len(choices) > 1:
        indexes = [c.get("index") if isinstance(c, dict) else None for c in choices]
        raise ValueError(f"the answer has {len(choices)} choices (indexes {indexes[:8]}) for a request of one (n = 1)")
    index = choices[0].get("index", 0)
    if index != 0 or isinstance(index, bool):
        shown = index if isinstance(index, int) else repr(str(index)[:20])
        raise ValueError(f"the answer's one choice has index {shown}, not 0")
    return choices[0]


def read_choice(response: dict[str, Any], text: str | None, params: SamplingParams) -> Choice:
    """`text` is what lm-eval's parse_generations read from the response (None: the server sent null content).

    finish reasons: OpenAI's "length" -> "length"; its "stop" covers both the end-of-sequence token and a stop
    string, told apart only when the server adds vLLM's `stop_reason` (a string: "stop"; None or a token id: "eos"),
    otherwise "stop". A stop string still present in the text (servers may apply at most 4) is cut here, as our
    engine does. Raises ValueError when the response has no choice or more than one (`one_choice`), its text is not
    a string, or the server says it did not complete the request (finish reason "abort", "error", ...:
    FAILED_FINISH_REASONS)."""
    choice = one_choice(response)
    if text is not None and not isinstance(text, str):
        raise ValueError(f"the answer's text is {type(text).__name__}, not a string")
    usage = response.get("usage") if isinstance(response.get("usage"), dict) else {}
    text = text or ""
    reason = _finish_reason(choice, usage.get("completion_tokens"), params)
    cut = min((text.find(s) for s in params.stop if s and s in text), default=-1)
    if cut >= 0:
        text, reason = text[:cut], "stop"
    return Choice(
        text=text,
        finish_reason=reason,
        token_ids=_int_list(choice.get("token_ids")),
        prompt_token_ids=_int_list(response.get("prompt_token_ids") or choice.get("prompt_token_ids")),
        completion_tokens=usage.get("completion_tokens") if isinstance(usage.get("completion_tokens"), int) else None,
        prompt_tokens=usage.get("prompt_tokens") if isinstance(usage.get("prompt_tokens"), int) else None,
    )


def _finish_reason(choice: dict[str, Any], completion_tokens: Any, params: SamplingParams) -> str:
    reason = choice.get("finish_reason")
    if reason == "length":
        return "length"
    if reason == "stop":
        if "stop_reason" in choice:
            return "stop" if isinstance(choice["stop_reason"], str) else "eos"
        return "stop"
    if reason is None:  # some servers leave it out: a full-length answer was cut by max_tokens
        full = isinstance(completion_tokens, int) and completion_tokens >= params.max_new_tokens
        return "length" if full else "stop"
    if isinstance(reason, str) and reason.lower() in FAILED_FINISH_REASONS:
        raise ValueError(f"the server did not complete the request (finish_reason {reason[:40]!r})")
    return "stop"  # other names of a natural end ("eos", "stop_sequence", ...)


def _int_list(value: Any) -> list[int] | None:
    if isinstance(value, list) and value and isinstance(value[0], list):
        value = value[0]  # a batch of one prompt
    if isinstance(value, list) and all(isinstance(v, int) for v in value):
        return list(value)
    return None
