"""The one line a run prints, and its summary keeps, when its server failed it (`server.watch`
finds why): from the run's events alone, so it imports nothing that talks to a server."""

from __future__ import annotations

from typing import Any

from ...event_types import FAILING_EVENTS

# What a server says when it cannot sample with a per-request seed (vLLM's CPU build, 0.32: its engine core dies),
# and what to do about it.
SEEDED_SAMPLING_ERRORS = ("Generator does not use offset",)
SEEDED_SAMPLING_HINT = (
    "the server failed on seeded sampling: rerun with --request-seeds none (sampled requests then carry no seed)"
)


def server_failure_line(events: list[dict[str, Any]]) -> str | None:
    """One line for a run's output when its server failed it (`run` prints it after its verdict; the summary keeps
    it): the stall's reason when the run gave up on the server, else how the server it started exited during the
    run, else the first line of its log after which the
    engine could not answer, else the first failing line of its log or KV leak of its metric; None when the server's
    events fail nothing (and for a run of our own engine, whose events are no server's). A failure that seeded
    sampling caused says so, and what to do."""
    line = _failure(events)
    if _seeded_sampling_failed(events):
        return f"{line or 'server: requests failed'}; {SEEDED_SAMPLING_HINT}"
    return line


def _seeded_sampling_failed(events: list[dict[str, Any]]) -> bool:
    said = " ".join(str(e.get(k, "")) for e in events for k in ("message", "cause", "reason", "error"))
    return any(error in said for error in SEEDED_SAMPLING_ERRORS)


def _failure(events: list[dict[str, Any]]) -> str | None:
    stalled = next((e for e in events if e["type"] == "server_stalled"), None)
    if stalled is not None:
        return f"server: {stalled['reason']} ({stalled['unanswered']} documents unanswered)"
    exited = next((e for e in events if e["type"] == "server_exited"), None)
    if exited is not None:
        return f"server: {exited['reason']}"
    from_log = [e for e in events if e.get("source") == "server_log"]
    fatal = next((e for e in from_log if e.get("fatal")), None)
    if fatal is not None:
        return f"server: {fatal['message']}, log line {fatal['line']}"
    failing = next(
        (
            e
            for e in events
            if e["type"] == "kv_leak" or (e.get("source") == "server_log" and e["type"] in FAILING_EVENTS)
        ),
        None,
    )
    if failing is not None:
        where = f", log line {failing['line']}" if failing.get("source") == "server_log" else ""
        said = failing.get("message") or failing["type"]
        return f"server: {said}{where}"
    return None
