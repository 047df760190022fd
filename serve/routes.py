"""The HTTP endpoints: /v1/completions, /v1/chat/completions, /v1/models (behind the API key, as vLLM's /v1 is),
/health, /version and /metrics.

A generation request: auth -> bounded body -> JSON and fields -> model -> tickets into the engine loop -> the
answer once every choice finished, or a stream of server-sent events. A streamed answer starts only with its first
tokens, so a request the engine refuses still gets its 4xx/5xx status. A client that goes away (streaming or not)
has its requests aborted, which frees their KV blocks."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from .. import __version__
from ..workers.interface import GenerationOutput, RequestDelta
from .engine_loop import Channel, Event, Rejected, Ticket
from .errors import ApiError, engine_failed, unavailable
from .limits import check_api_key, read_body
from .responses import Responder, stop_reason
from .schemas import ChatRequest, CompletionRequest, EngineInput, chat_input, completion_input, parse_body
from .streaming import SSE_DONE, TextStream, sse


def _state(request: Request):
    return request.app.state.serving


def require_api_key(request: Request) -> None:
    check_api_key(request, _state(request).settings.api_key)


router = APIRouter()
v1 = APIRouter(prefix="/v1", dependencies=[Depends(require_api_key)])


@router.get("/health")
def health(request: Request) -> JSONResponse:
    ok, why = _state(request).loop.healthy
    return JSONResponse({"status": why}, status_code=200 if ok else 503)


@router.get("/version")
def version() -> dict[str, str]:
    return {"version": __version__}


@router.get("/metrics")
def metrics(request: Request) -> Response:
    m = _state(request).metrics
    return Response(m.render(), media_type=m.content_type)


@v1.get("/models")
def models(request: Request) -> dict[str, Any]:
    state = _state(request)
    card = {
        "id": state.settings.model_name,
        "object": "model",
        "created": state.started,
        "owned_by": "specdec-eval",
        "root": state.engine.identity.model,
        "max_model_len": state.settings.max_model_len,
    }
    return {"object": "list", "data": [card]}


@v1.post("/completions")
async def completions(request: Request) -> Response:
    return await _generate(request, chat=False)


@v1.post("/chat/completions")
async def chat_completions(request: Request) -> Response:
    return await _generate(request, chat=True)


class ClientGone(Exception):
    pass


async def _generate(request: Request, chat: bool) -> Response:
    state = _state(request)
    settings = state.settings
    raw = await read_body(request, settings.max_request_bytes)
    if chat:
        body: Any = parse_body(raw, ChatRequest)
        engine_input = chat_input(body, state.tokenizer)
    else:
        body = parse_body(raw, CompletionRequest)
        engine_input = completion_input(body, settings.vocab_size)
    if body.model is not None and body.model != settings.model_name:
        raise ApiError(
            404,
            f"model {body.model!r} is not served here (this server serves {settings.model_name!r})",
            code="model_not_found",
        )
    channel = Channel()
    tickets = [
        Ticket(
            p,
            engine_input.sampling,
            channel.poster(i),
            engine_input.default_max_tokens,
            engine_input.score_prompt,
            engine_input.generate,
        )
        for i, p in enumerate(engine_input.prompts)
    ]
    state.loop.submit(tickets)
    responder = Responder(
        chat, settings.model_name, tokenizer=state.tokenizer, token_ids_as_names=body.return_tokens_as_token_ids
    )
    if not chat:
        responder.echo, responder.logprobs, responder.prompt_logprobs = body.echo, body.logprobs, body.prompt_logprobs
    call = _Call(state, tickets, channel, responder, engine_input)
    watch = _DisconnectWatch(request)
    handed_over = False  # once the stream is returned, it aborts what is left when it ends
    try:
        if not body.stream:
            return JSONResponse(await call.whole(watch))
        first = await watch.next(channel)  # the status line waits for the first tokens (or the refusal)
        call.raise_if_failed(first[1])
        stream = _AbortingStream(
            call.events(first, body.include_usage),
            on_close=call.abort_unfinished,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache"},
        )
        handed_over = True
        return stream
    except ClientGone:
        return Response(status_code=499)  # nobody reads it: the client closed the connection
    finally:
        watch.close()
        if not handed_over:
            call.abort_unfinished()


class _Call:
    """One HTTP generation request on its way: its tickets, what came back, and how to answer."""

    def __init__(
        self, state, tickets: list[Ticket], channel: Channel, responder: Responder, engine_input: EngineInput
    ) -> None:
        self.state, self.tickets, self.channel, self.responder = state, tickets, channel, responder
        self.stop = engine_input.sampling.stop
        self.outputs: list[GenerationOutput | None] = [None] * len(tickets)

    def raise_if_failed(self, event: Event) -> None:
        if isinstance(event, Rejected):
            raise event.error
        if event.finished and event.output is not None and event.output.finish_reason in ("error", "aborted"):
            raise _failure(event.output)

    async def whole(self, watch: _DisconnectWatch) -> dict[str, Any]:
        while any(o is None for o in self.outputs):
            index, event = await watch.next(self.channel)
            self.raise_if_failed(event)
            if event.finished:
                self.outputs[index] = event.output
        prompts = [(_prompt_text(t.prompt, self.state.tokenizer), t.prompt_scored) for t in self.tickets]
        return self.responder.answer(self.outputs, [self._stop_reason(o) for o in self.outputs], prompts)

    async def events(self, first: tuple[int, Event], include_usage: bool) -> AsyncIterator[str]:
        texts = [TextStream(self.state.tokenizer, self.stop) for _ in self.tickets]
        started: set[int] = set()
        pending: tuple[int, Event] | None = first
        while any(o is None for o in self.outputs):
            index, event = pending or await self.channel.get()
            pending = None
            try:
                self.raise_if_failed(event)
            except ApiError as e:  # the status line has gone out: the error travels in the stream, as vLLM's does
                yield sse(e.body())
                yield SSE_DONE
                return
            yield sse(self._chunk(index, event, texts[index], index not in started))
            started.add(index)
        if include_usage:
            yield sse(self.responder.usage_chunk(self.outputs))
        yield SSE_DONE

    def _chunk(self, index: int, delta: RequestDelta, text: TextStream, first: bool) -> dict[str, Any]:
        if not delta.finished:
            return self.responder.chunk(index, text.add(delta.new_token_ids), delta.new_token_ids, first=first)
        out = delta.output
        self.outputs[index] = out
        return self.responder.chunk(
            index, text.finish(out.text), delta.new_token_ids, output=out, reason=self._stop_reason(out), first=first
        )

    def _stop_reason(self, output: GenerationOutput) -> str | None:
        return stop_reason(output, self.stop, self.state.tokenizer)

    def abort_unfinished(self) -> None:
        unfinished = [t for t, o in zip(self.tickets, self.outputs, strict=True) if o is None]
        if unfinished:
            self.state.loop.abort(unfinished)


def _prompt_text(prompt: Any, tokenizer: Any) -> str:
    """What `echo` puts before the completion: the prompt as sent, or its tokens' text."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and all(isinstance(t, int) for t in prompt):
        return tokenizer.decode(prompt)
    return ""  # chat messages: echo is a completions field


def _failure(output: GenerationOutput) -> ApiError:
    if output.finish_reason == "aborted":
        return unavailable("the request was aborted by the server")
    return engine_failed(f"the engine could not complete the request: {output.error or 'unknown error'}")


class _DisconnectWatch:
    """Notices a client that closes its connection while we wait for the engine (before any response byte)."""

    def __init__(self, request: Request) -> None:
        self._task = asyncio.ensure_future(_wait_for_disconnect(request))

    async def next(self, channel: Channel) -> tuple[int, Event]:
        getter = asyncio.ensure_future(channel.get())
        await asyncio.wait({getter, self._task}, return_when=asyncio.FIRST_COMPLETED)
        if getter.done():
            return getter.result()
        getter.cancel()
        raise ClientGone

    def close(self) -> None:
        self._task.cancel()


async def _wait_for_disconnect(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


class _AbortingStream(StreamingResponse):
    """A stream whose requests are aborted however it ends: finished, failed, or cut off by the client."""

    def __init__(self, content: AsyncIterator[str], on_close: Callable[[], None], **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self._on_close = on_close

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._on_close()
