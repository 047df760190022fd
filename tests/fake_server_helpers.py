"""A small ASGI app on 127.0.0.1 that plays an OpenAI-compatible server which stops answering: the first
`answer_first` completions are answered at once, every later one hangs (until the server stops) while /health and
/v1/models keep answering 200, as a TensorRT-LLM server whose executor loop died does (its issue #13318). /metrics
answers `metrics_text` (Prometheus text) when given. Used by tests/peers/server/test_stall.py and
scripts/measure_stall.py. And a proxy that makes our own server read as another engine (`OwnerProxy`)."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route


class AppOnThread:
    """An ASGI app served on 127.0.0.1 (a free port, `url`) from a daemon thread, while in a `with` block."""

    def __init__(self, app: Starlette) -> None:
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        config = uvicorn.Config(app, log_level="error", lifespan="off", timeout_graceful_shutdown=1)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True)

    def __enter__(self):  # the subclass itself
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("the fake server did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc) -> None:
        self._server.should_exit = True
        self._thread.join(10)
        self._sock.close()


class HangingServer(AppOnThread):
    """`delays_s`: how long the server takes to answer each of its first requests, in order (else at once)."""

    def __init__(
        self, answer_first: int, model: str = "m", metrics_text: str | None = None, delays_s: tuple[float, ...] = ()
    ) -> None:
        self.answer_first = answer_first
        self.delays_s = delays_s
        self.answered = 0
        self.hanging = 0
        self.metrics_text = metrics_text
        self._release: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

        async def completions(request: Request) -> JSONResponse:
            await request.json()
            if self.answered < self.answer_first:
                self.answered += 1
                if self.answered <= len(self.delays_s):
                    await asyncio.sleep(self.delays_s[self.answered - 1])
                return JSONResponse(
                    {
                        "id": "c",
                        "object": "text_completion",
                        "model": model,
                        "choices": [{"index": 0, "text": " 4", "finish_reason": "stop"}],
                        "usage": {"prompt_tokens": 3, "completion_tokens": 1},
                    }
                )
            self.hanging += 1
            if self._release is None:
                self._loop, self._release = asyncio.get_running_loop(), asyncio.Event()
            await self._release.wait()  # not answered until the server stops
            return JSONResponse({"error": {"message": "server stopped"}}, status_code=503)

        async def health(request: Request) -> JSONResponse:
            return JSONResponse({"status": "ok"})

        async def models(request: Request) -> JSONResponse:
            return JSONResponse({"object": "list", "data": [{"id": model, "object": "model", "owned_by": "fake"}]})

        async def metrics(request: Request) -> PlainTextResponse:
            if self.metrics_text is None:
                return PlainTextResponse("not found", status_code=404)
            return PlainTextResponse(self.metrics_text)

        super().__init__(
            Starlette(
                routes=[
                    Route("/v1/completions", completions, methods=["POST"]),
                    Route("/health", health),
                    Route("/v1/models", models),
                    Route("/metrics", metrics),
                ]
            )
        )

    def __exit__(self, *exc) -> None:
        if self._release is not None:  # the hanging requests end with a 503 rather than cancelled mid-await
            self._loop.call_soon_threadsafe(self._release.set)
        super().__exit__(*exc)


class OwnerProxy(AppOnThread):
    """Forwards every request to `upstream` unchanged, except that /v1/models names `owned_by` as the owner: our own
    server then reads as another engine (e.g. "llamacpp": the client asks it in OpenAI's legacy logprobs shape)."""

    def __init__(self, upstream: str, owned_by: str) -> None:
        async def forward(request: Request) -> Response:
            async with httpx.AsyncClient(base_url=upstream, timeout=600) as client:
                headers = {"content-type": request.headers.get("content-type", "")}
                got = await client.request(
                    request.method, request.url.path, content=await request.body(), headers=headers
                )
            if request.url.path == "/v1/models" and got.status_code == 200:
                listed = got.json()
                for entry in listed.get("data") or []:
                    entry["owned_by"] = owned_by
                return JSONResponse(listed)
            return Response(got.content, got.status_code, media_type=got.headers.get("content-type"))

        super().__init__(Starlette(routes=[Route("/{path:path}", forward, methods=["GET", "POST"])]))
