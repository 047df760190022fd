"""The one matcher: a server's log lines in, our events out, by one engine's signature table (`tables`).

Each event keeps the line it came from (`raw`, cut to MAX_RAW_CHARS) and its number (`line`, counted from 1 at the
log's first line), the signature that matched, and a message for a person. Python tracebacks are followed across
lines: a signature may match only a frame's source line (TensorRT-LLM's bare `assert len(self._saved_tensors) ==
0` has no message of its own), and an error line whose message is empty takes the traceback next to it as its
cause ("Encountered an error in forward function: " after that assertion's traceback), and an error line followed by
its traceback (`logger.exception`) gets that one."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ....workers.events import parse_event_line
from ...profiles.signature import LogFormat, Signature
from .tables import GENERIC, GENERIC_TAGS

MAX_RAW_CHARS = 500
TRACEBACK_START = "Traceback (most recent call last):"
# A traceback this few lines before an error line, or starting this few lines after it, is that line's cause.
CAUSE_DISTANCE = 3
_GENERIC_TAG_REGEXES = tuple(re.compile(t) for t in GENERIC_TAGS)


@dataclass
class _Traceback:
    start: int  # line number of its "Traceback (most recent call last):"
    last_code: tuple[int, str] | None = None  # the innermost frame's source line
    exception: tuple[int, str] | None = None  # its last line ("AssertionError: Sampling failed")

    def describe(self) -> str:
        where = f" at `{self.last_code[1]}` (log line {self.last_code[0]})" if self.last_code else ""
        exception = self.exception[1] if self.exception else "an exception"
        return f"{exception}{where}"


class LogMatcher:
    """Feed it every line of one log, in order (`feed`); it returns the events they mean. Events that take their cause
    from a traceback printed after them get it when that traceback ends (the dict returned is completed in place)."""

    def __init__(self, log_format: LogFormat) -> None:
        self.format = log_format
        self.signatures: tuple[Signature, ...] = (*log_format.signatures, *GENERIC)
        self._tags = (*log_format.tag_regexes, *_GENERIC_TAG_REGEXES)
        self._open: _Traceback | None = None
        self._last: _Traceback | None = None  # the last traceback that ended
        self._awaiting_cause: list[tuple[int, dict[str, Any]]] = []  # (line number, event) wanting the next one
        self._in_open: list[dict[str, Any]] = []  # events matched inside the open traceback: they get its exception

    def feed(self, raw: str, number: int) -> dict[str, Any] | None:
        """The event line `number` of the log means, or None. At most one event per line: the first signature that
        matches, the engine's own before the generic ones."""
        line = self._untagged(raw.rstrip("\r\n"))
        inside = self._track_traceback(line, number)
        if self._awaiting_cause and self._open is None:  # no traceback came after them
            self._awaiting_cause = [(at, e) for at, e in self._awaiting_cause if number - at <= CAUSE_DISTANCE]
        for sig in self.signatures:
            if sig.in_traceback and not inside:
                continue
            found = sig.regex.search(line)
            if found is None:
                continue
            event = self._event(sig, found.groupdict(), raw, number)
            if event is None:
                continue
            if inside:
                self._in_open.append(event)
            if sig.traceback == "before":
                self._cause_before(event, number)
            elif sig.traceback == "after":
                self._awaiting_cause.append((number, event))
            return event
        return None

    # --- tracebacks ---------------------------------------------------------------------------------------------

    def _track_traceback(self, line: str, number: int) -> bool:
        """Whether `line` is inside a traceback (its header, a frame, or its last line)."""
        if TRACEBACK_START in line:
            self._open = _Traceback(start=number)
            self._in_open = []
            return True
        if self._open is None:
            return False
        if not line.strip():
            return True  # a blank line inside the frames (rare), kept
        if line[:1].isspace():
            text = line.strip()
            if not text.startswith(("File ", "^", "~")):
                self._open.last_code = (number, text[:MAX_RAW_CHARS])
            return True
        self._open.exception = (number, line.strip()[:MAX_RAW_CHARS])
        self._close(number)
        return True

    def _close(self, number: int) -> None:
        tb, self._open = self._open, None
        self._last = tb
        for event in self._in_open:
            event["exception"] = tb.exception[1] if tb.exception else None
        self._in_open = []
        waiting, self._awaiting_cause = self._awaiting_cause, []
        for at, event in waiting:  # an error logged with `logger.exception`: its traceback follows it
            if tb.start - at <= CAUSE_DISTANCE:
                _set_cause(event, tb)

    def _cause_before(self, event: dict[str, Any], number: int) -> None:
        last = self._last
        if last is not None and last.exception is not None and number - last.exception[0] <= CAUSE_DISTANCE:
            _set_cause(event, last)

    # --- one event ----------------------------------------------------------------------------------------------

    def _untagged(self, line: str) -> str:
        for tag in self._tags:
            line = tag.sub("", line, count=1)
        return line

    def _event(self, sig: Signature, groups: dict[str, Any], raw: str, number: int) -> dict[str, Any] | None:
        fields = {k: _typed(v) for k, v in groups.items() if v is not None}
        if sig.nonzero is not None and not fields.get(sig.nonzero):
            return None
        event_type = sig.type
        if event_type is None:  # an event line of ours: its type and fields are in the line
            carried = parse_event_line(raw)
            if carried is None:
                return None
            event_type = carried.pop("type")
            fields = {("server_" + k if k in ("ts", "rank") else k): v for k, v in carried.items()}
        if self.format.rank_regex is not None and "server_rank" not in fields:
            ranked = self.format.rank_regex.search(raw)
            if ranked is not None:
                fields["server_rank"] = int(ranked["server_rank"])
        event = {
            "ts": None,
            "rank": 0,
            "type": event_type,
            **dict(sig.fields),
            **fields,
            "source": "server_log",
            "log_format": self.format.name,
            "signature": sig.name,
            "line": number,
            "raw": raw.rstrip("\r\n")[:MAX_RAW_CHARS],
        }
        event["message"] = _message(sig, event)
        event["fatal"] = sig.fatal
        return event


def _set_cause(event: dict[str, Any], tb: _Traceback) -> None:
    event["cause"] = tb.describe()
    event["cause_line"] = tb.exception[0] if tb.exception else tb.start
    if "error" in event and not event["error"]:  # an empty message ("... forward function: "): the traceback's
        event["error"] = tb.exception[1] if tb.exception else "an exception"
        event["message"] = f"{event['message']} {event['error']}"
    elif "error" not in event and event.get("fatal") and tb.exception:
        # a death whose line names no error (vLLM's "EngineCore encountered a fatal error."): its exception does
        event["message"] = f"{event['message']}: {tb.exception[1]}"


def _message(sig: Signature, event: dict[str, Any]) -> str:
    if sig.type is None:
        details = [f"{k}={event[k]}" for k in ("phase", "fields", "error", "reason", "num_blocks") if k in event]
        return f"{event['type']}" + (f": {', '.join(str(d) for d in details)}" if details else "")
    return sig.says.format_map(_Missing(event)).strip()


class _Missing(dict):
    """str.format_map's mapping: a field the line did not give reads as "?"."""

    def __missing__(self, key: str) -> str:
        return "?"


def _typed(value: str) -> Any:
    return int(value) if value.lstrip("-").isdigit() else value
