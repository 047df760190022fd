"""The ASGI app: `create_app(engine, settings)`. Its lifespan starts the engine loop and stops it (aborting what is
still in flight) when the server shuts down. Every error, ours or the framework's (unknown route, wrong method), and
a bug of ours (logged with its traceback), answers in OpenAI's JSON shape."""

from __future__ import annotations

import contextlib
import copy
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..workers.config import parse_bytes
from ..workers.interface import ServingEngine
from .defaults import DEFAULT_MAX_QUEUE, DEFAULT_MAX_REQUEST_SIZE
from .engine_loop import EngineLoop
from .errors import ApiError
from .limits import validate_api_key
from .metrics import ServerMetrics
from .routes import router, v1

log = logging.getLogger("specdec_eval.serve")


@dataclass(frozen=True)
class ServerSettings:
    model_name: str  # the id clients send as "model" (and /v1/models lists)
    max_model_len: int  # prompt + completion tokens of one request (the engine's max_seq_len)
    vocab_size: int  # token-id prompts must lie in 0..vocab_size-1
    api_key: str | None = None
    max_queue: int = DEFAULT_MAX_QUEUE  # requests held at once (running + waiting); more get 503
    max_request_bytes: int = parse_bytes(DEFAULT_MAX_REQUEST_SIZE)

    def __post_init__(self) -> None:
        validate_api_key(self.api_key)


@dataclass
class AppState:
    engine: ServingEngine
    settings: ServerSettings
    metrics: ServerMetrics
    loop: EngineLoop
    tokenizer: Any  # a copy of the engine's, for streamed text: the engine thread keeps the original to itself
    started: int = field(default_factory=lambda: int(time.time()))


def create_app(engine: ServingEngine, settings: ServerSettings) -> FastAPI:
    metrics = ServerMetrics(settings.model_name, spec_decoding=engine.identity.spec is not None)
    loop = EngineLoop(engine, metrics, settings.max_model_len, settings.max_queue)
    state = AppState(engine, settings, metrics, loop, copy.deepcopy(engine.tokenizer))

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        loop.start()
        try:
            yield
        finally:
            loop.stop()

    app = FastAPI(title="specdec-eval serve", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.serving = state
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_middleware(_JsonInternalErrors)
    app.include_router(router)
    app.include_router(v1)
    return app


async def _api_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    error = ApiError(exc.status_code, str(exc.detail), type="invalid_request_error")
    return JSONResponse(error.body(), status_code=exc.status_code, headers=dict(exc.headers or {}))


class _JsonInternalErrors:
    """A bug of ours in a handler: a JSON 500 that names the exception's type only (its text may quote the request),
    the traceback in the log, and the connection kept (starlette's own handler re-raises, and uvicorn then drops the
    connection). An error after the answer started can only end the connection."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def sending(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except Exception as exc:
            if started:
                raise
            log.exception("unexpected error in %s %s", scope.get("method"), scope.get("path"))
            error = ApiError(500, f"internal server error ({type(exc).__name__})", type="internal_error")
            await JSONResponse(error.body(), status_code=500)(scope, receive, send)
