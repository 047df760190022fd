"""An engine reached over HTTP: any OpenAI-compatible server (trtllm-serve, vLLM, SGLang, llama.cpp, or our own
`specdec-eval serve`), driven through lm-eval's `local-completions` / `local-chat-completions` backends
(`LocalCompletionsAPI` / `LocalChatCompletion`). It implements `InferenceEngine`.

Each request goes through the backend's `model_call` and `parse_generations` (lm-eval's payload, auth, timeout and
reading of the answer) in a thread of our pool (`concurrency`), with lm-eval's retry policy per request
(`client.requests`). Not through its `generate_until`: that stops at the first request still failing after its
retries and returns texts only, while a run needs one outcome per request (a failed request is a recorded failure
with its reason, never an empty answer scored as wrong), finish reasons, and each output as soon as it is done.

Beyond the answers (`server.watch`): the engine can start the server (`serve_cmd`) and follows its log
(`server_log`), whose known lines join this engine's events; a server that stops answering ends the run at once
with a `server_stalled` event, every unanswered document a failed request (`server.stall_watch`); after each call
the server's KV usage must return to idle (`server.kv_usage`), else a `kv_leak` event.

Token ids: the server's when it returns them (vLLM's `token_ids` / `prompt_token_ids`), else the local tokenizer's
encoding of the text (`stats["token_ids_source"]` says which), which misses the end-of-sequence token.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, wait
from typing import Any

from ...errors import UserError
from ...workers.config import SamplingParams
from ...workers.events import EventLog
from ...workers.interface import (
    EngineIdentity,
    GenerateStats,
    GenerationOutput,
    OutputSink,
    ProgressFn,
    Prompt,
    ScoredOutput,
    ScoreRequest,
)
from ...workers.loading.chat_template import render_chat
from ...workers.loading.tokenizer import encode_any
from ..profiles import SCORES_BY_PROMPT_LOGPROBS, pick_profile
from ..server.kv_usage import ServerKVUsage
from ..server.metrics import ResponseTally, ServerAcceptance
from ..server.response_acceptance import response_acceptance
from ..server.stall_watch import StallWatch
from ..server.watch import ServerWatch
from .config import EndpointConfig, EndpointURL, load_local_tokenizer
from .daemon_pool import DaemonPool
from .logprobs import UnusableLogprobs, parse_logprobs, token_key
from .probe import probe_server
from .requests import (
    Answer,
    Choice,
    SentPrompts,
    call_with_retries,
    chat_message_str,
    gen_kwargs,
    one_choice,
    quotes_prompt,
    read_choice,
    server_message,
)
from .scoring import ScoringChannel
from .token_text import ids_text_problem

TICK_S = 0.25  # how often a run looks for a stalled server while it waits for answers


def _not_a_server_body(record: logging.LogRecord) -> bool:
    """lm-eval's backend logs every failed request's body verbatim ("API request failed with error message: ..."),
    and a server's body may quote the prompt (a GPQA question). Dropped: each failure is recorded by us, scrubbed."""
    return not str(record.msg).startswith("API request failed with error message")


class EndpointEngine:
    """Connects on construction (after starting the server when `serve_cmd` says so, and following its log when
    there is one): asks /v1/models for the served model id (and the `Server` header), /version for a version, and
    takes the first acceptance-metrics and KV-usage scrapes. Raises UserError when the server cannot be reached and
    no served model id was given, or when the given id is not served, or when the server it started did not come up."""

    def __init__(self, config: EndpointConfig, tokenizer: Any | None = None) -> None:
        self.config = config
        self.url = EndpointURL.parse(config.url)
        if tokenizer is None:
            tokenizer, tokenizer_source = load_local_tokenizer(config.tokenizer, config.model)
        else:
            tokenizer_source = "given"
        self._tokenizer = tokenizer
        self._token_key = token_key(tokenizer)  # a server's token texts as numbers (`client.logprobs`)
        self._headers = config.headers()
        self._secrets = (*self.url.secrets, *([config.resolved_api_key()] if config.resolved_api_key() else []))
        self.watch = ServerWatch(
            self.url.root,
            config.serve_cmd,
            config.server_log,
            config.server_log_format,
            self._secrets,
            self._headers,
            config.startup_timeout_s,
            config.stop_grace_s,
            config.verify_tls,
        )
        try:  # a server this engine started is stopped again when anything below fails
            served, server = probe_server(self.url, config, self._headers, self._scrub)
            self.profile = pick_profile(config.engine_profile, server.get("owned_by"), server.get("server_header"))
            self.watch.identify(server.get("owned_by"), server.get("server_header"), config.engine_profile)
            self._backend = self._make_backend(served)
            self.metrics = ServerAcceptance(
                self.url.root, self._headers, served, config.max_draft_len or None, verify=config.verify_tls
            )
            self.metrics.start()
            server["acceptance_source"] = self.metrics.source
            if config.kv_drain_timeout_s > 0:  # after the acceptance scrape: TensorRT-LLM's JSON stats drain on reading
                kv = ServerKVUsage(self.url.root, self._headers, served, config.verify_tls, not self.metrics.drains)
                self.watch.watch_kv(kv, config.kv_drain_timeout_s)
            server.update(self.watch.record())
        except BaseException:
            self.watch.close()
            raise
        k = config.max_draft_len or None
        self._sent = SentPrompts()  # what a server's log line must not quote on our disk
        self.events = EventLog(rank=0)
        self._tally = ResponseTally(k)  # per-request acceptance, when the responses carry it
        self._last_stats = GenerateStats()
        self._scoring: ScoringChannel | None = None  # made at the first scoring (`client.scoring`)
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
                # What runs behind the URL, when this run started it: what a recorded control is keyed by.
                **({"server_command": server["command"]} if "command" in server else {}),
                **(
                    {"chat_template_kwargs": config.chat_template_kwargs.as_dict()}
                    if config.chat_template_kwargs
                    else {}
                ),
            },
            server=server,
        )

    # --- connection ---------------------------------------------------------------------------------

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
            timeout=max(1, math.ceil(self.config.timeout_s)),  # lm-eval takes whole seconds; 0 would never wait
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
        started: dict[int, float] = {}  # request index -> when its first attempt began (written by pool threads)
        budgets = {i: p.max_new_tokens for i, p in enumerate(params)}  # a long output is owed a long wait
        watch = StallWatch(self.config.stall_policy, time.monotonic(), budgets)
        pool = DaemonPool(self.config.concurrency, "endpoint")  # a stalled request must not keep the process alive
        futures = {pool.submit(self._request, i, prompts[i], params[i], started): i for i in range(len(prompts))}
        pending, stall, finished = set(futures), None, False

        def record(i: int, out: GenerationOutput) -> None:
            outputs[i] = out
            stats.num_output_tokens += out.stats.get("num_output_tokens", 0)
            stats.num_retries += out.stats.get("num_retries", 0)
            stats.num_failed += out.finish_reason == "error"
            stats.elapsed_s = time.perf_counter() - start
            if sink is not None and out.finish_reason != "error":
                sink.put(prompts[i], params[i], out)  # failures are not persisted: a resume retries them
            if progress is not None:
                progress(sum(o is not None for o in outputs), len(outputs), stats)

        try:
            with self.metrics.polling():  # a draining metrics source is read during the run, not only after
                while pending and stall is None:
                    done, pending = wait(pending, timeout=TICK_S, return_when=FIRST_COMPLETED)
                    for future in done:
                        i = futures[future]
                        answer, choice = future.result()
                        output = self._output(i, prompt_ids[i], answer, choice)
                        output.stats.update(_wall_times(started.get(i)))  # what `drift` orders documents by
                        watch.answered(answer.latency_s, time.monotonic(), output.stats.get("num_output_tokens"))
                        if choice is not None:
                            tally.add(answer.response)
                            self._tally.add(answer.response)
                        record(i, output)
                    if pending:
                        in_flight = {i: started[i] for i in map(futures.get, pending) if i in started}
                        stall = self.watch.stalled(watch, in_flight)
                if stall is not None:  # the server stopped answering: every unanswered document fails, now
                    found = self.watch.stall_report(stall, sum(o is None for o in outputs), self._scrub)
                    self.events.emit("server_stalled", **found)
                    for i in (i for i, o in enumerate(outputs) if o is None):
                        record(i, self._unanswered(i, prompt_ids[i], found["reason"]))
            finished = True
        finally:
            # Interrupted (Ctrl-C, a failing sink) or stalled: queued requests are dropped and requests in flight are
            # not waited for (they may take an hour, or never end); what was finished has already reached the sink.
            pool.shutdown(wait=finished and stall is None, cancel_futures=True)
        self._check_server_alive()  # a server that died while another process answered its port fails the run
        leak = self.watch.kv_leak() if stall is None else None  # the server's KV usage back at idle after the call
        if leak is not None:
            self.events.emit("kv_leak", **leak)
        # The responses' own counts when they carry them; else the server-wide delta (labelled by its "basis").
        stats.acceptance = tally.result() or self.metrics.delta_since(mark)
        self._last_stats = stats
        return outputs  # type: ignore[return-value]

    # --- a server that stops answering ----------------------------------------------------------------------------

    def _unanswered(self, index: int, prompt_ids: list[int], reason: str) -> GenerationOutput:
        error = f"not answered: {reason}"
        self.events.emit("request_failed", request_id=index, reason=error, retries=0)
        stats = {"num_prompt_tokens": len(prompt_ids), "num_retries": 0, "num_output_tokens": 0, "latency_s": 0.0}
        return GenerationOutput(index, prompt_ids, [], "", "error", stats, error=error)

    def _request(
        self, index: int, prompt: Prompt, params: SamplingParams, started: dict[int, float] | None = None
    ) -> tuple[Answer, Choice | None]:
        """Runs in a pool thread: send one request (with retries) and read it (lm-eval's parser, then ours). Whatever
        a server sends back, this returns: an answer that cannot be read is this request's recorded failure.
        `started`: where the request's start time is written (the stall watch reads it)."""
        if started is not None:
            started[index] = time.monotonic()
        seed = params.seed if params.seed is not None else self.config.seed * 1_000_003 + index
        message, sent = self._message(prompt)
        self._sent.add(sent)
        sends_seed = not params.greedy and self.config.request_seeds == "per-sample"
        kwargs = gen_kwargs(
            params,
            seed if sends_seed else None,
            self.config.chat,
            token_ids=self.profile is not None and self.profile.names_tokens_by_id,
            template_kwargs=self.config.chat_template_kwargs,
            profile=self.profile,
        )
        if self.config.request_seeds == "none":
            kwargs["seed"] = None  # sent as null: replaces the seed lm-eval's backend puts in every payload

        def send() -> dict[str, Any] | None:
            return self._backend.model_call(messages=[message], generate=True, gen_kwargs=kwargs)

        def on_retry(attempt: int, reason: str) -> None:
            self.events.emit("request_retried", request_id=index, attempt=attempt, reason=reason)

        answer = call_with_retries(send, self.config.max_retries, on_retry, self._secrets, sent)
        if answer.error is not None:
            return answer, None
        try:
            one = one_choice(answer.response)  # before lm-eval's parser, which would mix two choices into one
            text = self._backend.parse_generations(outputs=answer.response)[0]
            choice = read_choice(answer.response, text, params)
            if choice.token_ids is not None:  # the ids are judged, the text scored: they must be one answer
                problem = ids_text_problem(self._tokenizer, choice.token_ids, text or "", params.stop)
                if problem is not None:
                    raise ValueError(problem)
            response_acceptance(answer.response, self.config.max_draft_len or None)  # impossible counts: refused
            if params.logprobs is not None:  # None when the server sent none: the gate then says so
                try:
                    choice.logprobs = parse_logprobs(one, self._token_key, choice.token_ids)
                except UnusableLogprobs as exc:  # the answer stands; its logprobs are no evidence
                    choice.logprobs_problem = str(exc)
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
            if (why := _logprobs_name_other_tokens(choice.logprobs, token_ids)) is not None:
                choice.logprobs_problem = why  # a gate reading them would judge tokens the server never sent
        stats["num_output_tokens"] = (
            choice.completion_tokens if choice.completion_tokens is not None else len(token_ids)
        )
        stats["server_prompt_tokens"] = choice.prompt_tokens
        if choice.logprobs_problem is not None:  # asked for, sent, and not evidence: why (a gate says NO-GATE)
            stats["logprobs_unusable"] = choice.logprobs_problem
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

    def score_outputs(self, requests: Sequence[ScoreRequest]) -> list[ScoredOutput]:
        """Teacher forcing through the completions API's echo (`client.scoring`: as token ids, or as
        text where the server refuses ids), `concurrency` requests at a time, each with lm-eval's retry policy; a
        request the server cannot score has its `error`. How the server took them joins its record."""
        if self._scoring is None:
            vllm_extensions = self.profile is not None and self.profile.scores == SCORES_BY_PROMPT_LOGPROBS
            self._scoring = ScoringChannel(
                self.identity.model, self._tokenizer, self._token_key, vllm_extensions, self._post_scoring
            )
        pool = DaemonPool(self.config.concurrency, "scoring")  # daemons: a stuck request never holds the exit
        try:
            futures = [pool.submit(self._scoring.score, r) for r in requests]
            return [future.result() for future in futures]
        finally:
            pool.shutdown(wait=False)
            self._identity.server.update(self._scoring.record())

    def _post_scoring(self, body: dict[str, Any], sent: str) -> Answer:
        import requests as http  # lm-eval's client library: the retry policy reads its exceptions

        def send() -> dict[str, Any]:
            response = http.post(
                self.url.completions,
                json=body,
                headers=self._headers,
                timeout=self.config.timeout_s,
                verify=self.config.verify_tls,
            )
            response.raise_for_status()
            return response.json()

        def on_retry(attempt: int, reason: str) -> None:
            self.events.emit("request_retried", request_id="scoring", attempt=attempt, reason=reason)

        return call_with_retries(send, self.config.max_retries, on_retry, self._secrets, sent)

    def _check_server_alive(self) -> None:
        """The server this engine started is watched for the whole run: its exit, whenever it happened, is a
        `server_exited` event (its status and its log's last lines), which fails the run."""
        report = self.watch.exit_report(self._sent.withhold)
        if report is not None:
            self.events.emit("server_exited", **report)

    def collect_events(self) -> list[dict[str, Any]]:
        """This engine's events (requests, a stall, a KV leak, a server that exited) and the server's, read from its
        log: each of those keeps its line (`raw`, withheld when it quotes a prompt of this run) and line number."""
        self._check_server_alive()  # at the run's end, before `close` stops the server
        from_log = [self._withheld(e) for e in self.watch.events(catch_up=True)]
        if self.watch.log is not None:
            self._identity.server.update(self.watch.record())  # the table may have been recognised since
        return sorted([*self.events.events, *from_log], key=lambda e: e["ts"])

    def _withheld(self, event: dict[str, Any]) -> dict[str, Any]:
        return {
            k: self._sent.withhold(v)
            if k in ("raw", "message", "error", "cause", "exception") and isinstance(v, str)
            else v
            for k, v in event.items()
        }

    def reported_acceptance(self) -> dict[str, Any] | None:
        """The server's spec-decode acceptance since this engine connected: the sum of the responses' per-request
        counts (`server.response_acceptance`) when they carry them, with the server-wide counter delta
        beside it ("server_wide") as a cross-check; else that delta alone (`server.metrics`), its
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
        """The scraper's connection, and the server this engine started (stopped) and its log (read to its end);
        nothing else is held between calls (lm-eval's backend opens a connection per request)."""
        self.metrics.close()
        self.watch.close()


def _wall_times(sent_monotonic: float | None) -> dict[str, float]:
    """When a request was sent (its first attempt) and when its answer came, in seconds since the epoch: the
    `time.monotonic()` start turned into the wall clock's time, so a run's requests order by when they were sent."""
    now_wall, now = time.time(), time.monotonic()
    out = {"finished_at": round(now_wall, 4)}
    if sent_monotonic is not None:
        out["sent_at"] = round(now_wall - (now - sent_monotonic), 4)
    return out


def _logprobs_name_other_tokens(records: list[list] | None, encoded: list[int]) -> str | None:
    """Why logprob records that name token ids (vLLM's return_tokens_as_token_ids) cannot describe the answer's
    text as our tokenizer encodes it, or None. A server without `token_ids` in its answer leaves us the text, and a
    sampled text can re-encode into other pieces than were sampled: the records are then the truth, the encoding
    not, and positions after the first difference would compare other tokens' logprobs."""
    if not records or any(r[2] < 0 for r in records):  # keys < 0: tokens named by text, nothing to compare
        return None
    named = [r[2] for r in records]
    if named == encoded:
        return None
    first = next(
        (i for i, (a, b) in enumerate(zip(named, encoded, strict=False)) if a != b), min(len(named), len(encoded))
    )
    return (
        f"the logprobs name {len(named)} token(s), the answer's text encodes as {len(encoded)}, first differing at "
        f"token {first}: the server's own tokens are unknown (it sent no token_ids)"
    )
