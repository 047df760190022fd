"""What an endpoint run knows about its server beyond the answers: the server process it started (`serve_cmd`), the
server's log followed from its start (or the started process's output) and the table that reads it, whether the
server has stopped answering, and whether its KV usage returns to idle after a run. `ServerWatch` owns them for the
run: it starts them before the first request and stops them at the end; the endpoint engine records what it finds
as events."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import httpx

from ...event_types import FAILING_EVENTS
from ...redaction import redact_text
from ..profiles import AUTO, PROFILES
from .kv_usage import KVUsage, ServerKVUsage, check_drained
from .log import ServerLog, format_of_server
from .metrics import NOT_REPORTED
from .process import DEFAULT_STARTUP_TIMEOUT_S, DEFAULT_STOP_GRACE_S, ServerProcess, refuse_if_answering
from .stall_watch import Stall, StallWatch

CAPTURED = "the server's output, read while it ran and removed at the end"


class ServerWatch:
    """`serve_cmd`: start this server and wait until `url` answers (its output becomes the log: `log_path`, else a
    file in a temporary folder of this watch, removed at `close`: the run keeps its events and its scrubbed last
    lines, never the raw output). `log_path`: follow this log. `log_format`: a table name or "auto". `secrets`:
    hidden wherever a log line shows them."""

    def __init__(
        self,
        url: str,
        serve_cmd: str | None = None,
        log_path: str | None = None,
        log_format: str = "auto",
        secrets: tuple[str, ...] = (),
        headers: dict[str, str] | None = None,
        startup_timeout_s: float = DEFAULT_STARTUP_TIMEOUT_S,
        stop_grace_s: float = DEFAULT_STOP_GRACE_S,
        verify: bool = True,
    ) -> None:
        self.url, self.headers, self.verify = url, dict(headers or {}), verify
        self.process: ServerProcess | None = None
        self.log: ServerLog | None = None
        self._kv: ServerKVUsage | None = None
        self._kv_idle: KVUsage | None = None
        self._kv_timeout_s = 0.0
        self._kv_reported = 0.0  # the usage a kv_leak already named
        self.stop_grace_s = stop_grace_s
        self.startup_s: float | None = None
        self._fatal_seen_at: float | None = None
        self._captured_in: str | None = None  # the temporary folder of a log nobody named
        self.owner: str | None = None  # who holds the port of the server it started (or why that is not known)
        self._exit_reported = False
        if serve_cmd is not None and log_path is None:
            self._captured_in = tempfile.mkdtemp(prefix="specdec-eval-server-")
            log_path = str(Path(self._captured_in) / "server.log")
        self.log_path = log_path
        try:
            if serve_cmd is not None:
                self.process = ServerProcess(serve_cmd, log_path)
                secrets = (*secrets, *self.process.command.secrets)
            if log_path is not None:
                self.log = ServerLog(log_path, log_format, redact=lambda line: redact_text(line, secrets)).start()
            if self.process is not None:
                refuse_if_answering(url, headers, verify)  # else the run would judge whatever answers there
                self.process.start()
                self.startup_s = self.process.wait_ready(url, startup_timeout_s, headers, verify=verify)
                self.owner = self.process.prove_owner(url)
        except BaseException:
            self.close()
            raise

    def identify(self, owned_by: str | None, server_header: str | None, profile: str = AUTO) -> None:
        """Pick the log's table from the engine profile named (`--engine-profile`), else from what the server says it
        is (unless a table was named)."""
        if self.log is not None and profile != AUTO:
            self.log.choose(PROFILES[profile].log.name, f"from --engine-profile {profile}")
        elif self.log is not None:
            found = format_of_server(owned_by, server_header)
            said = f"owned_by {owned_by!r}" if format_of_server(owned_by, None) else f"Server header {server_header!r}"
            self.log.choose(found, f"from the server's identity ({said})")

    def watch_kv(self, reader: ServerKVUsage, timeout_s: float) -> None:
        """Read the server's KV usage now, idle, before any request of the run: after each call it must return here."""
        self._kv, self._kv_timeout_s = reader, timeout_s
        self._kv_idle = reader.read()

    def kv_leak(self) -> dict[str, Any] | None:
        """After a call has drained: the fields of a `kv_leak` event when the KV usage did not return to its idle
        value within the timeout (named once per level: a leak that stays is not named again), else None."""
        if self._kv is None or self._kv_idle is None:
            return None
        leak = check_drained(self._kv.read, self._kv_idle, self._kv_timeout_s)
        if leak is None or leak["used"] <= self._kv_reported:
            return None
        self._kv_reported = leak["used"]
        return leak

    def stalled(self, watch: StallWatch, in_flight: Mapping[int, float]) -> Stall | None:
        """Whether the server has stopped answering (`server.stall_watch`), with what the log and the process say."""
        fatal, seen_at = self.fatal()
        return watch.check(time.monotonic(), in_flight, seen_at if fatal is not None else None, self.exited())

    def stall_report(self, stall: Stall, unanswered: int, scrub: Callable[[str], str]) -> dict[str, Any]:
        """The fields of a `server_stalled` event: what was seen, what /health answers now, and the cause the log
        gives when a signature explains it; `reason` is what each unanswered document records."""
        cause = self.cause()
        health = self._health(scrub)
        reason = f"the server stopped answering: {stall.reason}; {health}"
        if cause:
            reason += f"; cause from its log: {cause}"
        else:
            reason += "; its log names no known cause" if self.log is not None else "; no server log to read"
        return {
            "reason": scrub(reason),
            "cause": cause,
            "unanswered": unanswered,
            "waited_s": round(stall.waited_s, 2),
            "health": health,
        }

    def _health(self, scrub: Callable[[str], str]) -> str:
        """What /health answers now (a dead TensorRT-LLM executor still answers 200 there)."""
        try:
            with httpx.Client(headers=self.headers, timeout=5.0, verify=self.verify) as client:
                return f"/health answers {client.get(self.url.rstrip('/') + '/health').status_code}"
        except httpx.HTTPError as exc:
            return scrub(f"/health does not answer ({type(exc).__name__})")

    def record(self) -> dict[str, Any]:
        """What the manifest keeps: the command (secrets scrubbed), the log and the table that read it, where the KV
        usage is read."""
        out: dict[str, Any] = {}
        if self._kv is not None:
            out["kv_usage_source"] = self._kv_idle.source if self._kv_idle is not None else NOT_REPORTED
        if self.process is not None:
            out["command"] = self.process.command.recorded
            out["startup_s"] = round(self.startup_s, 2) if self.startup_s is not None else None
            out["port_owner"] = self.owner
        if self.log is not None:
            out["log"] = CAPTURED if self._captured_in is not None else str(Path(self.log_path).resolve())
            out.update(self.log.record())
            name, why = self.log.log_format
            out["log_format"] = name
            out["log_format_from"] = why
        return out

    def events(self, catch_up: bool = False) -> list[dict[str, Any]]:
        """The log's events so far (catch_up: first read what the file holds now)."""
        if self.log is None:
            return []
        if catch_up:
            self.log.catch_up()
        return self.log.events()

    def fatal(self) -> tuple[dict[str, Any] | None, float | None]:
        """The first log line after which the engine cannot answer, and when this run first saw it (monotonic)."""
        event = self.log.first_fatal() if self.log is not None else None
        if event is not None and self._fatal_seen_at is None:
            self._fatal_seen_at = time.monotonic()
        return event, self._fatal_seen_at

    def exited(self) -> int | None:
        """The exit status of the server the run started, once it has exited (None: running, or not ours)."""
        return self.process.exit_code() if self.process is not None else None

    def exit_report(self, withhold: Callable[[str], str] = lambda line: line) -> dict[str, Any] | None:
        """Once, after the server the run started has exited on its own (before `close` stops it): the fields of a
        `server_exited` event: how it ended and its log's last lines (secrets scrubbed; `withhold` keeps a line
        that quotes a prompt off the record). Whatever answered the run's requests since was not that server."""
        if self.process is None or self._exit_reported or self.process.exit_code() is None:
            return None
        self._exit_reported = True
        code = self.process.exit_code()
        how = self.process.exit_status()
        failure = self.process.failure(
            f"the server the run started exited during the run with {how}: what answered since was not it"
        )
        lines = failure.splitlines()
        return {
            "reason": lines[0],
            "exit_status": code,
            "signal": how.removeprefix("signal ") if how.startswith("signal ") else None,
            "log_tail": [withhold(line) for line in lines[2:]],
        }

    def cause(self) -> str | None:
        """What the log says went wrong, for a person: the first fatal line, else the last failing one."""
        events = self.events()
        chosen = next((e for e in events if e.get("fatal")), None)
        if chosen is None:
            chosen = next((e for e in reversed(events) if e["type"] in FAILING_EVENTS), None)
        return None if chosen is None else f"{chosen['message']}, log line {chosen['line']}"

    def tail(self, n: int = 20) -> list[str]:
        return self.log.tail(n) if self.log is not None else []

    def close(self) -> None:
        """Stop the server the run started (SIGTERM, then SIGKILL after the grace period), then read the log to its
        end (what the server wrote while stopping included), then remove a log that was captured for this run only."""
        if self.process is not None:
            self.process.stop(self.stop_grace_s)
        if self.log is not None:
            self.log.stop()
        if self._captured_in is not None:
            shutil.rmtree(self._captured_in, ignore_errors=True)
