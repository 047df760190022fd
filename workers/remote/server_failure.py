"""The one line a run prints, and its summary keeps, when its server failed it (workers/remote/server_watch.py
finds why): from the run's events alone, so it imports nothing that talks to a server."""

from __future__ import annotations

from typing import Any


def server_failure_line(events: list[dict[str, Any]]) -> str | None:
    """One line for a run's output when its server failed it (the plug `run` prints after its verdict): the stall's
    reason when the run gave up on the server, else the first line of its log after which the engine could not
    answer, else the first leak; None when the server's events fail nothing."""
    stalled = next((e for e in events if e["type"] == "server_stalled"), None)
    if stalled is not None:
        return f"server: {stalled['reason']} ({stalled['unanswered']} documents unanswered)"
    fatal = next((e for e in events if e.get("source") == "server_log" and e.get("fatal")), None)
    if fatal is not None:
        return f"server: {fatal['message']}, log line {fatal['line']}"
    leak = next((e for e in events if e["type"] in ("kv_leak", "kv_block_leak")), None)
    if leak is not None:
        where = f", log line {leak['line']}" if leak.get("source") == "server_log" else ""
        said = leak.get("message") or f"{leak['type']}: {leak.get('num_blocks')} blocks"
        return f"server: {said}{where}"
    return None
