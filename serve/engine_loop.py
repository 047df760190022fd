"""The one thread that owns the engine (a `ServingEngine` is not thread-safe): it takes new requests and aborts from
a thread-safe inbox, adds them to the engine, steps while any request is unfinished, and hands each request's
deltas to its waiting handler on the server's event loop (`Channel`, through `call_soon_threadsafe`). A request that
arrives while others decode joins the running batch at the next step: continuous batching across HTTP requests.

Prompts are tokenized here too (`engine.encode`, chat templates included), so the context-length check, which needs
the prompt's token count, answers through the same channel as the tokens."""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace

from ..errors import UserError
from ..workers.config import SamplingParams
from ..workers.interface import GenerationOutput, Prompt, RequestDelta, ScoredOutput, ScoreRequest, ServingEngine
from .errors import ApiError, bad_request, engine_failed, unavailable
from .event_lines import EventLines
from .metrics import ServerMetrics

log = logging.getLogger("specdec_eval.serve")


@dataclass
class Rejected:
    """Posted instead of deltas: the request was refused, failed outside the engine, or the server stopped."""

    error: ApiError


Event = RequestDelta | Rejected


class Channel:
    """The handler's side of the hand-over: events of the request's choices, tagged with the choice index."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[tuple[int, Event]] = asyncio.Queue()

    def poster(self, index: int) -> Callable[[Event], None]:
        """A function the engine thread may call."""

        def post(event: Event) -> None:
            try:
                self._loop.call_soon_threadsafe(self._queue.put_nowait, (index, event))
            except RuntimeError:  # the server's event loop is closed: nobody is waiting any more
                pass

        return post

    async def get(self) -> tuple[int, Event]:
        return await self._queue.get()


@dataclass(eq=False)
class Ticket:
    """One prompt of one HTTP request. After `submit`, only the engine thread changes it."""

    prompt: Prompt
    sampling: SamplingParams
    post: Callable[[Event], None]
    default_max_tokens: bool = False  # the client set no limit: use what the context leaves
    score_prompt: int | None = None  # score the prompt first (echo, prompt_logprobs), with this many alternatives
    generate: bool = True  # False: the prompt's scoring only (echo with max_tokens 0)
    request_id: int | None = None
    done: bool = False
    # Set by the engine thread before it posts the ticket's first event: the prompt's teacher-forced scoring
    prompt_scored: ScoredOutput | None = None


class EngineLoop:
    def __init__(self, engine: ServingEngine, metrics: ServerMetrics, max_model_len: int, max_in_flight: int) -> None:
        self.engine = engine
        self.metrics = metrics
        self.max_model_len = max_model_len
        self.max_in_flight = max_in_flight
        self._inbox: collections.deque[tuple[str, Ticket | None]] = collections.deque()
        self._wake = threading.Event()
        self._lock = threading.Lock()  # guards the counts and flags below
        self._in_flight = 0
        self._draining = False
        self._stopping = False
        self._failure: str | None = None  # why the loop died, if it did
        self._live: dict[int, Ticket] = {}  # engine request id -> ticket (engine thread only)
        self._event_lines = EventLines()  # the engine's events, written to the server's log
        self._thread = threading.Thread(target=self._run, name="engine-loop", daemon=True)

    # --- any thread ---------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def submit(self, tickets: list[Ticket]) -> None:
        """Queue the tickets of one request, all or none; 503 when the server is full, draining or broken (worth a
        retry), 400 for a request with more prompts than the server ever holds at once (never worth one)."""
        most = self.max_in_flight
        if len(tickets) > most:
            raise bad_request(
                f"this request has {len(tickets)} prompts, more than the server holds at once "
                f"(--max-queue {most}); send at most {most} per request"
            )
        with self._lock:
            if self._failure is not None:
                raise unavailable(f"the engine loop stopped: {self._failure}", retry_after_s=30)
            if self._draining or self._stopping:
                raise unavailable("the server is shutting down")
            if self._in_flight + len(tickets) > self.max_in_flight:
                raise unavailable(f"the server holds {self._in_flight} requests (--max-queue {self.max_in_flight})")
            self._in_flight += len(tickets)
            # Under the lock: once the loop has failed or stopped (flags set under it), nothing new is queued.
            self._inbox.extend(("add", t) for t in tickets)
        self._wake.set()

    def abort(self, tickets: list[Ticket]) -> None:
        """The client went away: free the engine's KV blocks of these tickets (no-op for finished ones)."""
        self._inbox.extend(("abort", t) for t in tickets)
        self._wake.set()

    def begin_drain(self) -> None:
        """Refuse new requests; in-flight ones go on."""
        with self._lock:
            self._draining = True

    def abort_all(self) -> None:
        """End every request in flight now, each with a 503 (the shutdown's grace period is over)."""
        self._inbox.append(("abort_all", None))
        self._wake.set()

    def stop(self, timeout_s: float = 30.0) -> None:
        """Abort whatever is still in flight and end the thread."""
        with self._lock:
            self._stopping = True
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    @property
    def healthy(self) -> tuple[bool, str]:
        with self._lock:
            if self._failure is not None:
                return False, f"engine loop stopped: {self._failure}"
            if self._draining or self._stopping:
                return False, "shutting down"
        return self._thread.is_alive(), "ok" if self._thread.is_alive() else "engine loop not running"

    @property
    def in_flight(self) -> int:
        with self._lock:
            return self._in_flight

    # --- the engine thread --------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._sync()  # events of the start-up (warmup OOMs)
            while True:
                if self._take_inbox():
                    self._sync()  # aborts return KV blocks at once
                with self._lock:
                    stopping = self._stopping
                if stopping:
                    break
                if self.engine.has_unfinished_requests:
                    self._step()
                    continue
                self._wake.clear()
                if not self._inbox:
                    self._wake.wait(0.5)
            self._fail_all(unavailable("the server is shutting down"))
        except BaseException as exc:  # never leave a handler waiting for a loop that is gone
            log.exception("engine loop failed")
            with self._lock:
                self._failure = f"{type(exc).__name__}: {exc}"
            self._fail_all(engine_failed(f"the engine loop failed: {self._failure}"))

    def _take_inbox(self) -> bool:
        took = False
        while self._inbox:
            kind, ticket = self._inbox.popleft()
            took = True
            if kind == "add":
                self._add(ticket)
            elif kind == "abort":
                self._abort(ticket)
            else:
                self._fail_all(unavailable("the server is shutting down"))
        return took

    def _add(self, ticket: Ticket) -> None:
        try:
            ids = self.engine.encode(ticket.prompt)
            if ticket.score_prompt is not None:
                ticket.prompt_scored = self._score_prompt(ids, ticket.score_prompt)
            if not ticket.generate:
                return self._answer_scoring_only(ticket, ids)
            sampling = self._fit_context(len(ids), ticket)
            ticket.request_id = self.engine.add_request(ids, sampling)
        except ApiError as e:
            return self._reject(ticket, e)
        except UserError as e:  # the engine's own refusal (empty or too long a prompt, no chat template)
            return self._reject(ticket, bad_request(str(e)))
        except Exception as e:  # a tokenizer that chokes on this input fails this request only
            log.exception("cannot add a request")
            return self._reject(ticket, engine_failed(f"cannot add the request: {type(e).__name__}: {e}"))
        self._live[ticket.request_id] = ticket
        self.metrics.request_added(len(ids))

    def _score_prompt(self, ids: list[int], top: int) -> ScoredOutput:
        """Teacher forcing over the prompt, between two engine steps (this thread owns the engine)."""
        if len(ids) > self.max_model_len:
            raise bad_request(
                f"this model's maximum context length is {self.max_model_len} tokens; the prompt has {len(ids)}"
            )
        if len(ids) < 2:  # the first token has no logprob: nothing to score
            return ScoredOutput([], [])
        scored = self.engine.score_outputs([ScoreRequest((ids[0],), tuple(ids[1:]), SamplingParams(), top)])[0]
        if scored.error is not None:
            raise bad_request(f"cannot score the prompt: {scored.error}")
        return scored

    def _answer_scoring_only(self, ticket: Ticket, ids: list[int]) -> None:
        """echo with max_tokens 0: the answer is the prompt's scoring, with no generation."""
        self.metrics.request_added(len(ids))
        output = GenerationOutput(index=0, prompt_token_ids=list(ids), token_ids=[], text="", finish_reason="length")
        self.metrics.request_finished("length", output)
        self._release(ticket)
        ticket.post(RequestDelta(-1, [], finished=True, output=output))

    def _fit_context(self, num_prompt_tokens: int, ticket: Ticket) -> SamplingParams:
        room = self.max_model_len - num_prompt_tokens
        if ticket.default_max_tokens:
            if room < 1:
                raise bad_request(
                    f"this model's maximum context length is {self.max_model_len} tokens; the prompt "
                    f"has {num_prompt_tokens}, which leaves no room for an answer"
                )
            return replace(ticket.sampling, max_new_tokens=room)
        wanted = ticket.sampling.max_new_tokens
        if wanted > room:
            raise bad_request(
                f"this model's maximum context length is {self.max_model_len} tokens; you asked for "
                f"{num_prompt_tokens + wanted} ({num_prompt_tokens} in the prompt, {wanted} for the "
                f"completion)"
            )
        return ticket.sampling

    def _abort(self, ticket: Ticket) -> None:
        if ticket.request_id is not None and self._live.pop(ticket.request_id, None) is not None:
            self.engine.abort(ticket.request_id)
            self.metrics.request_finished("aborted")
            self._release(ticket)

    def _step(self) -> None:
        try:
            deltas = self.engine.step()
        except Exception as exc:  # not one request's failure (those come back as deltas): fail everyone in flight
            log.exception("engine step failed")
            self._fail_all(engine_failed(f"engine step failed: {type(exc).__name__}: {exc}"))
            return
        for delta in deltas:
            ticket = self._live.get(delta.request_id)
            if ticket is None:
                continue
            self.metrics.tokens_generated(len(delta.new_token_ids))
            if delta.finished:
                del self._live[delta.request_id]
                self._release(ticket)
                reason = delta.output.finish_reason if delta.output is not None else "error"
                self.metrics.request_finished(reason, delta.output)
            ticket.post(delta)
        self._sync()

    def _sync(self) -> None:
        """Metrics up to date, and the engine's new events in the log."""
        events = self.engine.collect_events()
        self.metrics.sync(self.engine, self.in_flight, events)
        self._event_lines.write_new(events)

    def _fail_all(self, error: ApiError) -> None:
        for request_id, ticket in list(self._live.items()):
            try:
                self.engine.abort(request_id)
            except Exception:
                log.exception("cannot abort request %s", request_id)
            self.metrics.request_finished("error" if error.status == 500 else "aborted")
            self._reject(ticket, error)
        self._live.clear()
        while self._inbox:
            kind, ticket = self._inbox.popleft()
            if kind == "add" and ticket is not None:
                self._reject(ticket, error)

    def _reject(self, ticket: Ticket, error: ApiError) -> None:
        self._release(ticket)
        ticket.post(Rejected(error))

    def _release(self, ticket: Ticket) -> None:
        if not ticket.done:
            ticket.done = True
            with self._lock:
                self._in_flight -= 1
