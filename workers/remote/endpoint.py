"""An engine reached over HTTP: any OpenAI-compatible server (trtllm-serve, vLLM, SGLang, llama.cpp, or our own
`specdec-eval serve`), driven through lm-eval's own `local-completions` / `local-chat-completions` backends
(`LocalCompletionsAPI` / `LocalChatCompletion`). It implements `InferenceEngine` (workers/interface.py).

Why the backend's per-request pieces and not its `generate_until`: that call stops at the first request that still
fails after its retries (tenacity re-raises, and with num_concurrent > 1 asyncio.gather drops the other answers),
and it returns texts only. A run needs one outcome per request (a failed or timed-out request is a recorded
failure with its reason, never an empty answer scored as wrong), finish reasons, and each output as soon as it is
done. So every request goes through the backend's `model_call` (lm-eval's payload, auth header, timeout and POST)
and `parse_generations` (lm-eval's reading of the answer), each in a thread of our pool (`concurrency`), with
lm-eval's retry policy applied per request (workers/remote/endpoint_requests.py).

Token ids: the server's when it returns them (vLLM's `token_ids` / `prompt_token_ids`); otherwise the local
tokenizer's encoding of the returned text and of the prompt (`stats["token_ids_source"]` says which). Re-encoding
gives the server's tokens for plain text, but not the end-of-sequence token, which no text shows.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any

import httpx

from ...errors import UserError
from ..config import SamplingParams
from ..events import EventLog
from ..interface import (
    EngineIdentity,
    GenerateStats,
    GenerationOutput,
    OutputSink,
    ProgressFn,
    Prompt,
)
from ..loading.chat_template import render_chat
from ..loading.tokenizer import encode_any
from .endpoint_config import EndpointConfig, EndpointURL, load_local_tokenizer
from .endpoint_logprobs import parse_logprobs, token_key
from .endpoint_requests import (
    Answer,
    Choice,
    call_with_retries,
    chat_message_str,
    gen_kwargs,
    quotes_prompt,
    read_choice,
    server_message,
)
from .response_acceptance import response_acceptance
from .server_metrics import ResponseTally, ServerAcceptance

PROBE_TIMEOUT_S = 30.0
# Servers whose model card says they take vLLM's return_tokens_as_token_ids (logprobs then name token ids, not texts)
NAMES_TOKENS_BY_ID = frozenset({"vllm", "specdec-eval"})


def _not_a_server_body(record: logging.LogRecord) -> bool:
    """lm-eval's backend logs every failed request's body verbatim ("API request failed with error message: ..."),
    and a server's body may quote the prompt (a GPQA question). Dropped: each failure is recorded by us, scrubbed."""
    return not str(record.msg).startswith("API request failed with error message")


def one_line(exc: BaseException) -> str:
    """An httpx error in one line: a status error as its status (httpx's own text adds a second line with a link), any
    other as its type and message, whitespace collapsed."""
    if isinstance(exc, httpx.HTTPStatusError):
        return f"HTTP {exc.response.status_code} {exc.response.reason_phrase}".rstrip()
    return " ".join(f"{type(exc).__name__}: {exc}".split())


class EndpointEngine:
    """Connects on construction: asks /v1/models for the served model id (and the `Server` header), /version for a
    version, and takes the first acceptance-metrics scrape. Raises UserError when the server cannot be reached
    and no served model id was given, or when the given id is not served."""

    def __init__(self, config: EndpointConfig, tokenizer: Any | None = None) -> None:
        self.config = config
        self.url = EndpointURL.parse(config.url)
        if tokenizer is None:
            tokenizer, tokenizer_source = load_local_tokenizer(config.tokenizer, config.model)
        else:
            tokenizer_source = "given"
        self._tokenizer = tokenizer
        self._token_key = token_key(tokenizer)  # a server's token texts as numbers (endpoint_logprobs.py)
        self._headers = config.headers()
        self._secrets = (*self.url.secrets, *([config.resolved_api_key()] if config.resolved_api_key() else []))
        served, server = self._probe()
        self._backend = self._make_backend(served)
        k = config.max_draft_len or None
        self.metrics = ServerAcceptance(self.url.root, self._headers, served, k, verify=config.verify_tls)
        self.metrics.start()
        server["acceptance_source"] = self.metrics.source
        self.events = EventLog(rank=0)
        self._tally = ResponseTally(k)  # per-request acceptance, when the responses carry it
        self._last_stats = GenerateStats()
        self._identity = EngineIdentity(
            kind="endpoint",
            model=served,
            spec=config.spec,
            max_draft_len=config.max_draft_len,
            kv_cache=config.kv_cache,
            dtype=config.dtype,
            resolved_dtype=None,  # a server does not say what ran
            tp_size=config.tp_size,
            world_size=config.tp_size,
            config={
                "endpoint": self.url.public,
                "api": "chat" if config.chat else "completions",
                "served_model": served,
                "spec": config.spec,
                "max_draft_len": config.max_draft_len,
                "kv_cache": config.kv_cache,
                "dtype": config.dtype,
                "tp_size": config.tp_size,
                "tokenizer": tokenizer_source,
                "server_version": server.get("version"),
                **(
                    {"chat_template_kwargs": config.chat_template_kwargs.as_dict()}
                    if config.chat_template_kwargs
                    else {}
                ),  # fmt: skip
            },
            server=server,
        )

    # --- connection ---------------------------------------------------------------------------------

    def _probe(self) -> tuple[str, dict[str, Any]]:
        with httpx.Client(headers=self._headers, timeout=PROBE_TIMEOUT_S, verify=self.config.verify_tls,
                          follow_redirects=True) as client:  # fmt: skip
            return self._probe_with(client)

    def _probe_with(self, client: httpx.Client) -> tuple[str, dict[str, Any]]:
        server: dict[str, Any] = {"base_url": self.url.public, "server_header": None, "version": None}
        served = self.config.served_model
        try:
            response = client.get(self.url.root + "/v1/models")
            if response.status_code in (401, 403):
                raise UserError(self._refused(response))
            response.raise_for_status()
            cards = [m for m in response.json().get("data", []) if isinstance(m, dict) and "id" in m]
            models = [m["id"] for m in cards]
            owners = {m["id"]: m.get("owned_by") for m in cards}
            server["server_header"] = response.headers.get("server")
        except (httpx.HTTPError, ValueError, AttributeError) as exc:
            reason = self._scrub(one_line(exc))
            if served is None:
                message = f"cannot list the models of {self.url.public} ({reason}); pass the served model id"
                raise UserError(message) from None
            server["models_error"] = reason
            models = []
        if served is None:
            if len(models) != 1:
                listing = ", ".join(models) or "none"
                raise UserError(f"{self.url.public} serves {len(models)} models ({listing}); pass the one to use")
            served = models[0]
        elif models and served not in models:
            raise UserError(f"{self.url.public} does not serve {served!r} (it serves: {', '.join(models)})")
        server["version"] = self._version(client)
        if models:
            server["owned_by"] = owners.get(served)  # which server this is, as far as its model card says
        return served, server

    def _refused(self, response: httpx.Response) -> str:
        """The one line for a server that refuses our key: an API key is what it wants, whatever else was given."""
        status = f"HTTP {response.status_code} {response.reason_phrase}".rstrip()
        if self.config.resolved_api_key() is None:
            return (f"{self.url.public} wants an API key ({status}): pass it with --api-key KEY (sent as "
                    f"'Authorization: Bearer KEY') or set OPENAI_API_KEY")  # fmt: skip
        return (f"{self.url.public} refused the API key ({status}): pass the server's key with --api-key KEY "
                f"(sent as 'Authorization: Bearer KEY'; --api-key wins over OPENAI_API_KEY)")  # fmt: skip

    def _version(self, client: httpx.Client) -> str | None:
        try:
            response = client.get(self.url.root + "/version")
            if response.status_code == 200:
                value = response.json().get("version")
                return str(value) if value is not None else None
        except (httpx.HTTPError, ValueError, AttributeError):
            pass
        return None

    def _make_backend(self, served: str) -> Any:
        from lm_eval.models.openai_completions import LocalChatCompletion, LocalCompletionsAPI

        logging.getLogger("lm_eval.models.api_models").addFilter(_not_a_server_body)  # once: a filter is kept once
        cls = LocalChatCompletion if self.config.chat else LocalCompletionsAPI
        backend = cls(
            base_url=self.url.chat_completions if self.config.chat else self.url.completions,
            model=served,
            # No tokenizer on lm-eval's side: we send text and count tokens ourselves, so lm-eval neither probes
            # the server for a remote tokenizer nor truncates prompts to its max_length.
            tokenizer_backend=None,
            tokenized_requests=False,
            num_concurrent=1,  # concurrency is our thread pool's
            max_retries=self.config.max_retries + 1,
            timeout=int(self.config.timeout_s),
            header=self._headers,
            seed=self.config.seed,
            verify_certificate=self.config.verify_tls,
        )
        # No end-of-sequence stop string: the server stops at its own EOS tokens (and `ignore_eos` can turn that
        # off). Setting lm-eval's cached property also spares its "cannot determine EOS string" warning.
        backend.__dict__["eos_string"] = None
        return backend

    def _scrub(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    # --- the InferenceEngine protocol -----------------------------------------------------------------

    @property
    def identity(self) -> EngineIdentity:
        return self._identity

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    @property
    def last_stats(self) -> GenerateStats:
        return self._last_stats

    def encode(self, prompt: Prompt) -> list[int]:
        """The local tokenizer's ids of a prompt, as our engine would build them (chat: its chat template)."""
        return encode_any(self._tokenizer, prompt, self.config.chat_template_kwargs)

    def generate(
        self,
        prompts: Sequence[Prompt],
        sampling: SamplingParams | Sequence[SamplingParams] | None = None,
        progress: ProgressFn | None = None,
        sink: OutputSink | None = None,
    ) -> list[GenerationOutput]:
        """One output per prompt, in prompt order. Requests run `concurrency` at a time; each output goes to the
        sink and the progress callback as soon as it is done (from this thread). A request that failed after its
        retries has finish reason "error", its reason in `error`, and a `request_failed` event."""
        sampling = sampling or SamplingParams()
        params = [sampling] * len(prompts) if isinstance(sampling, SamplingParams) else list(sampling)
        if len(params) != len(prompts):
            raise UserError(f"{len(prompts)} prompts but {len(params)} sampling parameter sets")
        prompt_ids = [self.encode(p) for p in prompts]
        for i, ids in enumerate(prompt_ids):
            if not ids:
                raise UserError(f"prompt {i} is empty")
        stats = GenerateStats(num_requests=len(prompts), num_prompt_tokens=sum(map(len, prompt_ids)))
        mark, tally = self.metrics.checkpoint(), ResponseTally(self.config.max_draft_len or None)
        outputs: list[GenerationOutput | None] = [None] * len(prompts)
        start = time.perf_counter()
        pool = ThreadPoolExecutor(max_workers=self.config.concurrency, thread_name_prefix="endpoint")
        futures = {pool.submit(self._request, i, prompts[i], params[i]): i for i in range(len(prompts))}
        finished = False
        try:
            with self.metrics.polling():  # a draining metrics source is read during the run, not only after
                for future in as_completed(futures):
                    i = futures[future]
                    answer, choice = future.result()
                    if choice is not None:
                        tally.add(answer.response)
                        self._tally.add(answer.response)
                    out = self._output(i, prompt_ids[i], answer, choice)
                    outputs[i] = out
                    stats.num_output_tokens += out.stats.get("num_output_tokens", 0)
                    stats.num_retries += out.stats.get("num_retries", 0)
                    stats.num_failed += out.finish_reason == "error"
                    stats.elapsed_s = time.perf_counter() - start
                    if sink is not None and out.finish_reason != "error":
                        sink.put(prompts[i], params[i], out)  # failures are not persisted: a resume retries them
                    if progress is not None:
                        progress(sum(o is not None for o in outputs), len(outputs), stats)
            finished = True
        finally:
            # Interrupted (Ctrl-C, a failing sink): queued requests are dropped and requests in flight are not
            # waited for (they may take an hour); what was finished has already reached the sink.
            pool.shutdown(wait=finished, cancel_futures=True)
        # The responses' own counts when they carry them; else the server-wide delta (labelled by its "basis").
        stats.acceptance = tally.result() or self.metrics.delta_since(mark)
        self._last_stats = stats
        return outputs  # type: ignore[return-value]

    def _request(self, index: int, prompt: Prompt, params: SamplingParams) -> tuple[Answer, Choice | None]:
        """Runs in a pool thread: send one request (with retries) and read it (lm-eval's parser, then ours). Whatever
        a server sends back, this returns: an answer that cannot be read is this request's recorded failure."""
        seed = params.seed if params.seed is not None else self.config.seed * 1_000_003 + index
        message, sent = self._message(prompt)
        kwargs = gen_kwargs(params, None if params.greedy else seed, self.config.chat,
                            token_ids=self.identity.server.get("owned_by") in NAMES_TOKENS_BY_ID,
                            template_kwargs=self.config.chat_template_kwargs)  # fmt: skip

        def send() -> dict[str, Any] | None:
            return self._backend.model_call(messages=[message], generate=True, gen_kwargs=kwargs)

        def on_retry(attempt: int, reason: str) -> None:
            self.events.emit("request_retried", request_id=index, attempt=attempt, reason=reason)

        answer = call_with_retries(send, self.config.max_retries, on_retry, self._secrets, sent)
        if answer.error is not None:
            return answer, None
        try:
            text = self._backend.parse_generations(outputs=answer.response)[0]
            choice = read_choice(answer.response, text, params)
            if params.logprobs is not None:  # None when the server sent none: the gate then says so
                choice.logprobs = parse_logprobs(answer.response["choices"][0], self._token_key)
            return answer, choice
        except ValueError as exc:  # read_choice's own reasons (a server's finish reason the most it quotes)
            why = str(exc) if not quotes_prompt(str(exc), sent) else "unreadable answer (it quotes the prompt)"
        except Exception as exc:  # a shape lm-eval's parser did not expect; its message may quote the body
            why = f"unreadable answer ({type(exc).__name__})"
        said = server_message(answer.response, sent)  # e.g. an error object in a 200 answer
        answer.error = self._scrub(f"{why}: {said}" if said else why)
        return answer, None

    def _message(self, prompt: Prompt) -> tuple[Any, str]:
        """What lm-eval's create_message takes (text for /v1/completions, JSON-wrapped messages for chat), and the
        text it carries (what a server's error message could echo)."""
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], int):
            prompt = self._tokenizer.decode(prompt)  # token ids travel as their text
        if self.config.chat:
            messages = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
            return chat_message_str(messages), "\n".join(str(m.get("content") or "") for m in messages)
        if isinstance(prompt, list):  # chat messages to a completions endpoint: our chat template, as text
            text = render_chat(self._tokenizer, prompt, template_kwargs=self.config.chat_template_kwargs)
            return text, text
        return prompt, prompt

    def _output(self, index: int, prompt_ids: list[int], answer: Answer, choice: Choice | None) -> GenerationOutput:
        stats: dict[str, Any] = {
            "num_prompt_tokens": len(prompt_ids),
            "num_retries": answer.attempts - 1,
            "latency_s": round(answer.latency_s, 4),
        }
        if choice is None:
            self.events.emit("request_failed", request_id=index, reason=answer.error, retries=answer.attempts - 1)
            stats["num_output_tokens"] = 0
            return GenerationOutput(index, prompt_ids, [], "", "error", stats, error=answer.error)
        token_ids = choice.token_ids
        stats["token_ids_source"] = "server" if token_ids is not None else "local_tokenizer"
        if token_ids is None:
            token_ids = list(self._tokenizer.encode(choice.text, add_special_tokens=False))
        stats["num_output_tokens"] = (
            choice.completion_tokens if choice.completion_tokens is not None else len(token_ids)
        )
        stats["server_prompt_tokens"] = choice.prompt_tokens
        acceptance = response_acceptance(answer.response, self.config.max_draft_len or None)
        if acceptance is not None:  # per request, in our engine's layout: the pipeline reads it as it reads ours
            stats["acceptance"] = acceptance
        return GenerationOutput(
            index=index,
            prompt_token_ids=choice.prompt_token_ids or prompt_ids,
            token_ids=token_ids,
            text=choice.text,
            finish_reason=choice.finish_reason,
            stats=stats,
            logprobs=choice.logprobs,
        )

    def score(self, pairs: Sequence[tuple[list[int], list[int]]]) -> list[tuple[float, bool]]:
        raise UserError(
            "an endpoint serves generation only: loglikelihood (multiple-choice) tasks need a local engine; "
            "run them without --endpoint"
        )

    def collect_events(self) -> list[dict[str, Any]]:
        return sorted(self.events.events, key=lambda e: e["ts"])

    def reported_acceptance(self) -> dict[str, Any] | None:
        """The server's spec-decode acceptance since this engine connected: the sum of the responses' per-request
        counts (workers/remote/response_acceptance.py) when they carry them, with the server-wide counter delta
        beside it ("server_wide") as a cross-check; else that delta alone (workers/remote/server_metrics.py), its
        "basis" saying it is the fallback; None when the server reports neither (`identity.server
        ["acceptance_source"]` then says so)."""
        delta = self.metrics.delta()
        per_request = self._tally.result()
        if per_request is None:
            return delta
        if delta is None:
            return per_request
        return {**per_request, "server_wide": {**delta, "basis": "server-wide counter delta (a cross-check)"}}

    def close(self) -> None:
        """The scraper's connection; nothing else is held between calls (lm-eval's backend opens a connection per
        request)."""
        self.metrics.close()
