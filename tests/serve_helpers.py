"""Helpers of the server tests (tests/test_serve*.py): a server on a thread of the test process, and readers of
its answers and server-sent events."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families
from specdec_eval.serve.app import ServerSettings
from specdec_eval.serve.server import BackgroundServer

from .conftest import make_engine

MODEL = "tiny"


def tiny_engine(tiny, **overrides):
    return make_engine(tiny, **overrides)


def settings_for(engine, **overrides) -> ServerSettings:
    return ServerSettings(MODEL, engine.max_seq_len, engine.model_config.vocab_size, **overrides)


def serving(engine, **overrides) -> BackgroundServer:
    return BackgroundServer(engine, settings_for(engine, **overrides))


def sse_events(lines) -> list[Any]:
    """The JSON payloads of a server-sent event stream's lines, and "[DONE]" for its end marker."""
    out: list[Any] = []
    for line in lines:
        if not line:
            continue
        assert line.startswith("data: "), line
        data = line.removeprefix("data: ")
        out.append(data if data == "[DONE]" else json.loads(data))
    return out


def stream(client: httpx.Client, path: str, body: dict[str, Any]) -> list[Any]:
    with client.stream("POST", path, json={**body, "stream": True}) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        return sse_events(response.iter_lines())


def joined(events: list[Any], chat: bool = False) -> dict[str, Any]:
    """A stream of one choice put back together: text, token ids, finish reason."""
    assert events[-1] == "[DONE]"
    chunks = [e for e in events[:-1] if e["choices"]]
    text = "".join((c["choices"][0]["delta"].get("content") or "") if chat else c["choices"][0]["text"]
                   for c in chunks)  # fmt: skip
    ids = [t for c in chunks for t in c["choices"][0]["token_ids"]]
    reasons = [c["choices"][0]["finish_reason"] for c in chunks]
    assert all(r is None for r in reasons[:-1]) and reasons[-1] is not None
    return {"text": text, "token_ids": ids, "finish_reason": reasons[-1], "last": chunks[-1]["choices"][0]}


def metric_values(url: str) -> dict[str, float]:
    """Every sample of /metrics by name (labels summed)."""
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(httpx.get(url + "/metrics").text):
        for sample in family.samples:
            values[sample.name] = values.get(sample.name, 0.0) + sample.value
    return values


def wait_until(predicate, timeout_s: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def kv_returned(url: str) -> bool:
    """Every KV block free and no request left in the engine (from the server's gauges)."""
    m = metric_values(url)
    return m["specdec_kv_free_blocks"] == m["specdec_kv_blocks"] and m["specdec_live_requests"] == 0


OPENAI_FINISH = {"eos": "stop", "stop": "stop", "length": "length"}
