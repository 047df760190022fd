"""A server the run starts itself (`--serve-cmd "CMD"`): the command runs in a session of its own with its stdout and
stderr in one log file (which `server.log` follows), the run waits until it answers, and stops it
afterwards: SIGTERM to its whole process group, SIGKILL after a grace period. What is recorded of the command has its
secrets scrubbed (`redaction`: keys, tokens, `user:password@` in URLs).

The command is a shell-like string split with shlex; leading NAME=VALUE words set environment variables for it, as a
shell does (`SPECDEC_EVAL_API_KEY=k specdec-eval serve ...`). No shell runs it."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from ...errors import UserError
from ...redaction import REDACTED, redact_argv, redact_text

DEFAULT_STARTUP_TIMEOUT_S = 900.0  # a large model's load and warmup on a busy machine
DEFAULT_STOP_GRACE_S = 30.0
READY_PATHS = ("/health", "/v1/models")
ALREADY_ANSWERS = "already answers"  # in the one line a run refuses a busy URL with (a sweep waits and retries)
_ENV_WORD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


class ServerStartFailed(UserError):
    """The server died before it answered, or did not answer in time: one line, then the log's last lines."""


@dataclass(frozen=True)
class ServerCommand:
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()

    @classmethod
    def parse(cls, command: str) -> ServerCommand:
        try:
            words = shlex.split(command)
        except ValueError as exc:
            raise UserError(f"cannot read the server command ({exc})") from None
        env = []
        while words and _ENV_WORD.match(words[0]):
            name, _, value = words.pop(0).partition("=")
            env.append((name, value))
        if not words:
            raise UserError("the server command is empty")
        return cls(tuple(words), tuple(env))

    @property
    def words(self) -> list[str]:
        return [f"{k}={v}" for k, v in self.env] + list(self.argv)

    @property
    def recorded(self) -> str:
        """The command as a manifest may show it: secrets scrubbed."""
        return shlex.join(redact_argv(self.words))

    @property
    def secrets(self) -> tuple[str, ...]:
        """The values the scrubbing hides (to hide them again wherever the server prints them: its log)."""
        found = []
        for word, shown in zip(self.words, redact_argv(self.words), strict=True):
            if word != shown:
                found.extend(_hidden(word, shown))
        return tuple(s for s in found if s)


class ServerProcess:
    """`start()` runs the command with its output in `log_path`; `wait_ready(url)` until it answers; `stop()`."""

    def __init__(self, command: str, log_path: str | Path, cwd: str | Path | None = None) -> None:
        self.command = ServerCommand.parse(command)
        self.log_path = Path(log_path)
        self.cwd = cwd
        self._process: subprocess.Popen | None = None
        self.started_at: float | None = None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def start(self) -> ServerProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **dict(self.command.env), "PYTHONUNBUFFERED": "1"}  # its lines reach the log at once
        with self.log_path.open("wb") as log:  # this server's log only: an old server's lines must not count
            try:
                self._process = subprocess.Popen(
                    self.command.argv,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=env,
                    cwd=self.cwd,
                    start_new_session=True,
                )
            except OSError as exc:
                raise UserError(
                    f"cannot start the server command ({exc.strerror or exc}): {self.command.recorded}"
                ) from None
        self.started_at = time.monotonic()
        return self

    def exit_code(self) -> int | None:
        """None while it runs."""
        return None if self._process is None else self._process.poll()

    def exit_status(self) -> str | None:
        """How it ended, in words ("status 3", "signal SIGKILL"); None while it runs."""
        code = self.exit_code()
        return None if code is None else describe_exit(code)

    def failure(self, why: str) -> str:
        """`why`, the command (secrets scrubbed) and the log's last lines: what a person needs to see why it ended."""
        return self._failure(why)

    def prove_owner(self, url: str) -> str:
        """That what answers on `url` is this server: the process listening on its port is the one started or one
        it started (`port_owner`). Raises ServerStartFailed (and stops it) when another process holds the port;
        returns what was found, or why it could not be checked (another machine, another user's process)."""
        from .port_owner import check_owner

        owner = check_owner(url, self._process.pid)
        if owner.ours is False:
            self.stop()
            raise ServerStartFailed(self._failure(f"{url} answers, but {owner.why}"))
        return owner.why

    def wait_ready(
        self,
        url: str,
        timeout_s: float = DEFAULT_STARTUP_TIMEOUT_S,
        headers: dict | None = None,
        poll_s: float = 0.5,
        verify: bool = True,
    ) -> float:
        """Wait until the server answers 200 on /health or /v1/models; returns the seconds it took. Raises
        ServerStartFailed (and stops it) when it exits first or does not answer within `timeout_s`."""
        start = time.monotonic()
        with httpx.Client(headers=headers or {}, timeout=5.0, verify=verify) as client:
            while True:
                code = self.exit_code()
                if code is not None:
                    raise ServerStartFailed(self._failure(f"the server exited with status {code} before it answered"))
                if any(_answers(client, url.rstrip("/") + path) for path in READY_PATHS):
                    code = self.exit_code()
                    if code is not None:  # what answered is not this server: it is gone
                        raise ServerStartFailed(
                            self._failure(
                                f"the server exited with {describe_exit(code)}, yet {url} answers: another process "
                                "answers there"
                            )
                        )
                    return time.monotonic() - start
                if time.monotonic() - start > timeout_s:
                    self.stop()
                    raise ServerStartFailed(
                        self._failure(f"the server did not answer within {timeout_s:.0f} s (stopped)")
                    )
                time.sleep(poll_s)

    def stop(self, grace_s: float = DEFAULT_STOP_GRACE_S) -> int | None:
        """SIGTERM to its process group, SIGKILL after `grace_s`; returns its exit status (None if never started).
        Processes it started are stopped too when it has already exited (one may still answer on its port)."""
        process = self._process
        if process is None:
            return None
        if process.poll() is None:
            self._signal(signal.SIGTERM)
            try:
                process.wait(grace_s)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
                process.wait(30)
        elif self._group_alive():  # it is gone, what it started is not
            self._signal(signal.SIGTERM)
            deadline = time.monotonic() + grace_s
            while self._group_alive() and time.monotonic() < deadline:
                time.sleep(0.05)
            if self._group_alive():
                self._signal(signal.SIGKILL)
        return process.returncode

    def _group_alive(self) -> bool:
        """Whether a process of its group still runs (its id stays the group's while one does: never reused)."""
        try:
            os.killpg(self._process.pid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True

    def _signal(self, sig: int) -> None:
        try:
            os.killpg(self._process.pid, sig)  # its own session: the server and every process it started
        except ProcessLookupError:
            pass

    def _failure(self, why: str) -> str:
        lines = [redact_text(line, self.command.secrets) for line in tail_lines(self.log_path)]
        shown = "\n".join(f"  | {line}" for line in lines) if lines else "  (the log is empty)"
        return f"{why}: {self.command.recorded}\nlast lines of {self.log_path}:\n{shown}"

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def describe_exit(code: int) -> str:
    """A process's exit status in words: "status 3", or the signal that ended it ("signal SIGKILL")."""
    if code >= 0:
        return f"status {code}"
    try:
        return f"signal {signal.Signals(-code).name}"
    except ValueError:
        return f"signal {-code}"


def refuse_if_answering(url: str, headers: dict | None = None, verify: bool = True) -> None:
    """Before a server is started for `url`: UserError (one line) when something answers there already, naming it
    (its model id, its Server header). The run would judge whatever answers, and a server started on a busy port
    dies at once while the old one goes on answering."""
    what = _what_answers(url, headers, verify)
    if what is not None:
        raise UserError(
            f"{url} {ALREADY_ANSWERS} before the server command started ({what}): stop what serves there or give "
            "the command and --endpoint another port; the run would judge it, not the server it starts"
        )


def _what_answers(url: str, headers: dict | None, verify: bool) -> str | None:
    """What answers on `url`'s /v1/models, in a few words; None when nothing accepts a connection there."""
    try:
        with httpx.Client(headers=headers or {}, timeout=5.0, verify=verify) as client:
            response = client.get(url.rstrip("/") + "/v1/models")
    except (httpx.ConnectError, httpx.ConnectTimeout):
        return None
    except httpx.HTTPError as exc:
        return f"it accepts connections but did not answer HTTP ({type(exc).__name__})"
    said = [f"HTTP {response.status_code}"]
    try:
        models = [m.get("id") for m in response.json().get("data", []) if isinstance(m, dict)]
    except (ValueError, AttributeError):
        models = []
    if models:
        said.append(f"model {models[0]!r}")
    if response.headers.get("server"):
        said.append(f"Server: {response.headers['server']}")
    return ", ".join(said)


def _hidden(word: str, shown: str) -> list[str]:
    """The parts of `word` that redaction replaced by *** in `shown`."""
    pattern = "^" + "(.+?)".join(re.escape(part) for part in shown.split(REDACTED)) + "$"
    found = re.match(pattern, word, re.DOTALL)
    return list(found.groups()) if found else [word]


def _answers(client: httpx.Client, url: str) -> bool:
    try:
        return client.get(url).status_code == 200
    except httpx.HTTPError:
        return False


def tail_lines(path: Path, n: int = 20, max_bytes: int = 64 * 1024) -> list[str]:
    """The last `n` lines of a file (from its last `max_bytes`), or [] when there is none."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            data = f.read()
    except OSError:
        return []
    return data.decode("utf-8", "replace").splitlines()[-n:]
