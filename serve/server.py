"""Running the app under uvicorn: `serve_forever` for the command (blocks until SIGTERM / Ctrl-C), and
`BackgroundServer` for tests and the benchmark (the same server on a thread of this process).

Shutdown on SIGTERM or Ctrl-C: new requests get 503 at once, in-flight ones may finish within the grace period
(uvicorn's graceful shutdown), then the app's lifespan aborts what is left and the process exits with status 0."""

from __future__ import annotations

import contextlib
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator

import uvicorn

from .. import __version__
from ..workers.interface import ServingEngine
from .app import ServerSettings, create_app
from .defaults import BACKSTOP_S, DEFAULT_GRACE_S, DEFAULT_HOST, DEFAULT_PORT
from .engine_loop import EngineLoop


class _Server(uvicorn.Server):
    """uvicorn's server, changed for a clean stop. On the first SIGTERM / Ctrl-C the engine loop refuses new
    requests, and once the grace period is over it ends the ones still in flight with a 503 (a streamed answer gets
    it as its last event), so connections close by themselves; uvicorn's own timeout, a little later, is only a
    backstop. And the signal is not raised again after shutdown (uvicorn re-raises it so that the previous handler
    runs, which for SIGTERM would end the process by the signal instead of with status 0)."""

    def __init__(self, config: uvicorn.Config, loop: EngineLoop, grace_s: float) -> None:
        super().__init__(config)
        self._loop = loop
        self._grace_s = grace_s
        self._timer: threading.Timer | None = None

    def handle_exit(self, sig: int, frame) -> None:
        if self._timer is None:
            self._loop.begin_drain()
            self._timer = threading.Timer(self._grace_s, self._loop.abort_all)
            self._timer.daemon = True
            self._timer.start()
        super().handle_exit(sig, frame)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def bind(host: str, port: int) -> socket.socket:
    """The listening socket (port 0: any free port, read back with getsockname)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, port), family=family, backlog=2048)


def _server(engine: ServingEngine, settings: ServerSettings, grace_s: float, log_level: str) -> _Server:
    app = create_app(engine, settings)
    config = uvicorn.Config(app, log_level=log_level, timeout_graceful_shutdown=grace_s + BACKSTOP_S, lifespan="on",
                            server_header=False, headers=[("server", f"specdec-eval/{__version__}")],
                            access_log=log_level in ("debug", "trace"))  # fmt: skip
    return _Server(config, app.state.serving.loop, grace_s)


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def serve_forever(engine: ServingEngine, settings: ServerSettings, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT,
                  grace_s: float = DEFAULT_GRACE_S, log_level: str = "info") -> None:  # fmt: skip
    """Serve until SIGTERM or Ctrl-C. Prints one line with the URL once it listens."""
    sock = bind(host, port)
    server = _server(engine, settings, grace_s, log_level)
    ident = engine.identity
    what = f"{ident.spec} K={ident.max_draft_len}" if ident.spec else "plain decoding"
    print(
        f"specdec-eval serve: listening on {url_of(sock)} (model {settings.model_name!r}, {what}, kv "
        f"{ident.kv_cache}, {ident.world_size} rank(s)); SIGTERM or Ctrl-C stops it",
        file=sys.stderr,
        flush=True,
    )
    server.run(sockets=[sock])


class BackgroundServer:
    """`with BackgroundServer(engine, settings) as server:` serves on `server.url` from a thread of this process."""

    def __init__(self, engine: ServingEngine, settings: ServerSettings, host: str = DEFAULT_HOST, port: int = 0,
                 grace_s: float = 5.0, log_level: str = "warning") -> None:  # fmt: skip
        self._sock = bind(host, port)
        self.url = url_of(self._sock)
        self._server = _server(engine, settings, grace_s, log_level)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True)

    @property
    def app(self):
        return self._server.config.app

    def __enter__(self) -> BackgroundServer:
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the server did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        """As SIGTERM does: refuse new requests, let in-flight ones finish within the grace period, stop."""
        self._server.handle_exit(signal.SIGTERM, None)
        self._thread.join(60)
        self._sock.close()
