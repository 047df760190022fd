"""What a log table is made of: a `Signature` (one known line of one engine, and the event it means) and a
`LogFormat` (one engine's log: its signatures, the per-line tags it adds, and how to recognise it). The tables
themselves are data, one in each engine's profile; the one matcher that applies any of them is `server.log.matcher`."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property
from typing import Any


@dataclass(frozen=True)
class Signature:
    """One known log line. `pattern` is searched (not anchored) in the line after its format's per-line tag is
    removed: a release that changes the prefix or adds words around the message still matches. Its named groups
    become the event's fields (digits as ints).

    type: the event type (`event_types`); None for a line that carries its own (our event lines).
    says: the event's message for a person, formatted with the fields ("executor loop died: {error}").
    fatal: the engine cannot answer after this line: a run against it stops at once, naming this line.
    in_traceback: matches only a line inside a Python traceback (a frame's source line).
    traceback: where this line's cause is printed, if anywhere: "before" (a traceback ending just before it, as
    `traceback.print_exc()` then `logger.error(...)` print) or "after" (one starting on or just after it, as
    `logger.exception(...)` prints).
    nonzero: the event happens only when this field's number is > 0 (a counter in a periodic stats line).
    confirmed: False when the wording is ours, not checked against the engine's source (the test says so).
    fields: constant fields of the event (e.g. phase="warmup")."""

    name: str
    type: str | None
    pattern: str
    says: str
    fatal: bool = False
    in_traceback: bool = False
    traceback: str | None = None
    nonzero: str | None = None
    confirmed: bool = True
    fields: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        if self.traceback not in (None, "before", "after"):
            raise ValueError(f"{self.name}: traceback must be 'before', 'after' or None, not {self.traceback!r}")

    @cached_property
    def regex(self) -> re.Pattern[str]:
        return re.compile(self.pattern)


@dataclass(frozen=True)
class LogFormat:
    """One engine's log. name: what `--server-log-format` takes. line_tags: regexes of the tag a process puts before
    every line (vLLM's "(EngineCore_DP0 pid=123) "), removed before matching. rank_pattern: where a line names the
    server's rank (its `server_rank` group). markers: substrings only this engine's log holds (telling logs apart
    when nothing names the engine; what names it is its profile's `owners`)."""

    name: str
    engine: str
    signatures: tuple[Signature, ...]
    line_tags: tuple[str, ...] = ()
    rank_pattern: str | None = None
    markers: tuple[str, ...] = ()

    @cached_property
    def tag_regexes(self) -> tuple[re.Pattern[str], ...]:
        return tuple(re.compile(t) for t in self.line_tags)

    @cached_property
    def rank_regex(self) -> re.Pattern[str] | None:
        return re.compile(self.rank_pattern) if self.rank_pattern else None
