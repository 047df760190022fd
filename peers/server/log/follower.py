"""Following a server's log while a run goes: `ServerLog(path)` reads the file from its first byte (the server's
start, warmup included) on a thread of its own and keeps reading what the server appends until `stop()`.

Every line goes through the matcher of every known table (`matcher`, `tables`), so that which table applies can
be decided late: named by the user, read from the server's identity once it answers (`choose`), or, failing both,
recognised from the log's own content. `events()` gives the chosen table's events so far.

The log is read as any file a user names: it must be a regular file (checked on the opened descriptor: a device
reads without end, a FIFO blocks), it is read a chunk at a time, and a line is kept up to `MAX_LINE_BYTES` (the
rest of a longer line is skipped unread by any pattern). What stopped the reading is kept (`problem`)."""

from __future__ import annotations

import collections
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ....errors import UserError
from ....user_files import kind_of
from ...profiles import profile_of_server
from .matcher import LogMatcher
from .tables import GENERIC_FORMAT, LOG_FORMATS

AUTO = "auto"
POLL_S = 0.1
TAIL_LINES = 40  # kept for a message that shows how the log ended
DETECT_LINES = 5000  # content detection looks at this many lines
CHUNK_BYTES = 1 << 20  # read at most this much at a time
MAX_LINE_BYTES = 256 * 1024  # a longer line keeps its start only (no real log line comes near)


def check_log_format(name: str) -> str:
    """`name` if it names a table (or "auto"); else one line listing them."""
    if name != AUTO and name not in LOG_FORMATS:
        raise UserError(f"unknown server log format {name!r} (known: {AUTO}, {', '.join(LOG_FORMATS)})")
    return name


def format_of_server(owned_by: str | None, server_header: str | None) -> str | None:
    """The table a server's identity names: its /v1/models `owned_by`, else its `Server` header's product (never an
    `owned_by` other servers may say too: llama-cpp-python's "me" leaves the log's content to tell)."""
    profile = profile_of_server(owned_by, server_header, loose=False)
    return profile.log.name if profile is not None else None


class ServerLog:
    """A server's log file, followed from its start. `log_format`: a table name, or "auto" (then `choose`, or the
    log's content). `redact`: applied to every kept line (secrets). Use `start()` / `stop()`, or as a context
    manager."""

    def __init__(
        self,
        path: str | Path,
        log_format: str = AUTO,
        redact: Callable[[str], str] | None = None,
        poll_s: float = POLL_S,
    ) -> None:
        self.path = Path(path)
        self.named = check_log_format(log_format)
        self._chosen: tuple[str, str] | None = (self.named, "named") if self.named != AUTO else None
        self._redact = redact or (lambda line: line)
        self._poll_s = poll_s
        self._matchers = {name: LogMatcher(f) for name, f in LOG_FORMATS.items()}
        self._matchers[GENERIC_FORMAT.name] = LogMatcher(GENERIC_FORMAT)
        self._events: dict[str, list[dict[str, Any]]] = {name: [] for name in self._matchers}
        self._markers = dict.fromkeys(LOG_FORMATS, 0)
        self._tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self._lines = 0
        self._read_bytes = 0
        self._cut_lines = 0  # lines longer than MAX_LINE_BYTES (their start kept)
        self.problem: str | None = None  # why the log could not be read (to its end)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- reading --------------------------------------------------------------------------------------------------

    def start(self) -> ServerLog:
        if self._thread is None:
            self._thread = threading.Thread(target=self._follow, name="server-log", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Read what is left in the file, then stop following."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None

    def catch_up(self, timeout_s: float = 2.0) -> None:
        """Wait (at most `timeout_s`) until what the file holds now has been read: the server's last lines before
        the caller looks at the events."""
        try:
            size = self.path.stat().st_size
        except OSError:
            return
        deadline = time.monotonic() + timeout_s
        while self._read_bytes < size and self._thread is not None and time.monotonic() < deadline:
            time.sleep(self._poll_s / 4)

    def __enter__(self) -> ServerLog:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _follow(self) -> None:
        fd = None
        pending, skipping = b"", False  # skipping: the rest of a line already cut
        try:
            while True:
                stopping = self._stop.is_set()  # read once more after a stop: what the server wrote last
                if fd is None and self.path.exists():
                    fd = self._open()
                    if fd is None:
                        return
                while fd is not None and (chunk := os.read(fd, CHUNK_BYTES)):
                    self._read_bytes += len(chunk)
                    pending, skipping = self._consume(pending, chunk, skipping)
                    if self._stop.is_set() and not stopping:
                        break  # stop asked while reading: one last pass reads what is left
                if stopping:
                    if pending:
                        self._bounded_line(pending)
                    return
                self._stop.wait(self._poll_s)
        except (OSError, MemoryError) as exc:
            self.problem = f"reading stopped ({type(exc).__name__}: {exc})"
        finally:
            if fd is not None:
                os.close(fd)

    def _open(self) -> int | None:
        """The log's descriptor, or None (and `problem`) when it is not a regular file. Non-blocking: a FIFO would
        otherwise wait for a writer before its type could be checked."""
        fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
        kind = kind_of(os.fstat(fd).st_mode)
        if kind is None:
            return fd
        os.close(fd)
        self.problem = f"is {kind}, not a regular file: not read"
        return None

    def _consume(self, pending: bytes, chunk: bytes, skipping: bool) -> tuple[bytes, bool]:
        """Read the whole lines of `pending + chunk`; returns the line the server is still writing and whether it is
        the rest of a line already cut (dropped up to its end)."""
        *lines, rest = chunk.split(b"\n")
        for raw in lines:
            if not skipping:
                self._bounded_line(pending + raw)
            pending, skipping = b"", False
        if skipping:
            return b"", True
        pending += rest
        if len(pending) > MAX_LINE_BYTES:
            self._bounded_line(pending)
            return b"", True
        return pending, False

    def _bounded_line(self, raw: bytes) -> None:
        if len(raw) > MAX_LINE_BYTES:
            self._cut_lines += 1
            raw = raw[:MAX_LINE_BYTES] + b" [line cut]"
        self._line(raw.decode("utf-8", "replace"))

    def _line(self, text: str) -> None:
        text = self._redact(text.rstrip("\r"))
        with self._lock:
            self._lines += 1
            number = self._lines
            self._tail.append(text)
            if number <= DETECT_LINES:
                for name, log_format in LOG_FORMATS.items():
                    self._markers[name] += any(m in text for m in log_format.markers)
            now = round(time.time(), 6)
            for name, matcher in self._matchers.items():
                event = matcher.feed(text, number)
                if event is not None:  # kept as the matcher made it: a traceback after it may still complete it
                    event["ts"] = now
                    self._events[name].append(event)

    # --- what was read --------------------------------------------------------------------------------------------

    def choose(self, log_format: str | None, why: str) -> None:
        """The table the server's identity names (`format_of_server`); ignored when one was named by the user."""
        if self.named == AUTO and log_format is not None:
            self._chosen = (log_format, why)

    @property
    def log_format(self) -> tuple[str, str]:
        """(table name, why it applies): named, from the server's identity, recognised in the log's content, or
        "generic" (only what every PyTorch engine prints) when nothing tells."""
        if self._chosen is not None:
            return self._chosen
        with self._lock:
            best = max(self._markers, key=self._markers.get)
            if self._markers[best]:
                return best, f"recognised in the log ({self._markers[best]} line(s) with its markers)"
        return GENERIC_FORMAT.name, "nothing names the engine: generic signatures only"

    def events(self) -> list[dict[str, Any]]:
        """The chosen table's events so far, in log order (copies: later lines may still complete the originals)."""
        name = self.log_format[0]
        with self._lock:
            return [dict(e) for e in self._events[name]]

    def first_fatal(self) -> dict[str, Any] | None:
        """The first event after which the engine cannot answer (`Signature.fatal`), if one was read."""
        return next((e for e in self.events() if e.get("fatal")), None)

    @property
    def num_lines(self) -> int:
        with self._lock:
            return self._lines

    def record(self) -> dict[str, Any]:
        """What a manifest keeps about the reading: how many lines were read (and cut), and why it stopped early."""
        out: dict[str, Any] = {"log_lines_read": self.num_lines}
        if self._cut_lines:
            out["log_lines_cut"] = self._cut_lines
        if self.problem is not None:
            out["log_problem"] = self.problem
        return out

    def tail(self, n: int = 20) -> list[str]:
        """The last `n` lines read (redacted)."""
        with self._lock:
            return list(self._tail)[-n:]
