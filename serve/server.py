"""Running the app under uvicorn: `serve_forever` for the command (blocks until SIGTERM / Ctrl-C), and
`BackgroundServer` for tests and the benchmark (the same server on a thread of this process).

Shutdown on SIGTERM or Ctrl-C: the server keeps listening while it drains, so a new request gets 503 (not a refused
connection) and /health says "shutting down"; in-flight ones may finish within the grace period, the rest end with
a 503; then uvicorn stops listening, the app's lifespan stops the engine loop and the process exits with status 0.
A second signal ends the drain at once (and one more, Ctrl-C, stops waiting for connections)."""

from __future__ import annotations

import contextlib
import errno
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator

import uvicorn

from .. import __version__
from ..errors import UserError
from ..workers.interface import ServingEngine
from .app import ServerSettings, create_app
from .defaults import BACKSTOP_S, DEFAULT_GRACE_S, DEFAULT_HOST, DEFAULT_PORT
from .engine_loop import EngineLoop


class _Server(uvicorn.Server):
    """uvicorn's server, changed for a clean stop. uvicorn's own graceful shutdown closes the listening socket first,
    which refuses new connections for the whole grace period. Here the first SIGTERM / Ctrl-C only starts a drain:
    the engine loop refuses new requests with a 503 while in-flight ones finish; once none is left, or the grace
    period is over (the rest are then ended with a 503, a streamed answer getting it as its last event), uvicorn's
    shutdown begins, and its timeout is only a backstop. And the signal is not raised again after shutdown (uvicorn
    re-raises it so that the previous handler runs, which for SIGTERM would end the process by the signal instead of
    with status 0)."""

    def __init__(self, config: uvicorn.Config, loop: EngineLoop, grace_s: float) -> None:
        super().__init__(config)
        self._loop = loop
        self._grace_s = grace_s
        self._drain: threading.Thread | None = None
        self._hurry = threading.Event()  # a second signal: stop draining now

    def handle_exit(self, sig: int, frame) -> None:
        if self._drain is None:
            self._loop.begin_drain()
            self._drain = threading.Thread(target=self._drain_then_exit, args=(sig,), name="drain", daemon=True)
            self._drain.start()
        else:
            self._hurry.set()
            if not self._drain.is_alive():  # already shutting down: uvicorn's own second signal (Ctrl-C: force exit)
                super().handle_exit(sig, frame)

    def _drain_then_exit(self, sig: int) -> None:
        deadline = time.monotonic() + self._grace_s
        while self._loop.in_flight and time.monotonic() < deadline and not self._hurry.wait(0.05):
            pass
        if self._loop.in_flight:
            self._loop.abort_all()
        super().handle_exit(sig, None)

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
    """The listening socket (port 0: any free port, read back with getsockname). A port in use, an address that is
    not this machine's, or a port below 1024 without the right is a UserError of one line."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host, port), family=family, backlog=2048)
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            why = "the port is in use (another server?); pick another --port, or --port 0 for any free one"
        else:
            why = e.strerror or str(e)
        raise UserError(f"cannot listen on {host}:{port}: {why}") from None


def _server(engine: ServingEngine, settings: ServerSettings, grace_s: float, log_level: str) -> _Server:
    app = create_app(engine, settings)
    config = uvicorn.Config(
        app,
        log_level=log_level,
        timeout_graceful_shutdown=BACKSTOP_S,
        lifespan="on",
        server_header=False,
        headers=[("server", f"specdec-eval/{__version__}")],
        access_log=log_level in ("debug", "trace"),
    )
    return _Server(config, app.state.serving.loop, grace_s)


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def serve_forever(
    engine: ServingEngine,
    settings: ServerSettings,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    grace_s: float = DEFAULT_GRACE_S,
    log_level: str = "info",
) -> None:
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

    def __init__(
        self,
        engine: ServingEngine,
        settings: ServerSettings,
        host: str = DEFAULT_HOST,
        port: int = 0,
        grace_s: float = 5.0,
        log_level: str = "warning",
    ) -> None:
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

    def begin_stop(self) -> None:
        """What SIGTERM does, without waiting: the drain starts (new requests get 503, in-flight ones go on)."""
        self._server.handle_exit(signal.SIGTERM, None)

    def stop(self) -> None:
        """As SIGTERM does: refuse new requests, let in-flight ones finish within the grace period, stop."""
        self.begin_stop()
        self._thread.join(60)
        self._sock.close()
