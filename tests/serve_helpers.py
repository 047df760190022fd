"""Helpers of the server tests (tests/test_serve*.py): a server on a thread of the test process, readers of its
answers and server-sent events, and a scripted OpenAI-compatible stub for the endpoint client's tests."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
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


def serving(engine, grace_s: float = 5.0, **overrides) -> BackgroundServer:
    return BackgroundServer(engine, settings_for(engine, **overrides), grace_s=grace_s)


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
    text = "".join((c["choices"][0]["delta"].get("content") or "") if chat else c["choices"][0]["text"] for c in chunks)
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


class StubServer:
    """An OpenAI-compatible server on 127.0.0.1 that answers as a test scripts it: GET /v1/models lists `model`
    (or answers `models_status`); every POST calls `answer(body) -> (status, JSON-able or bytes)`. `posts` keeps
    the bodies received. Use as a context manager."""

    def __init__(
        self, answer: Callable[[dict[str, Any]], tuple[int, Any]], model: str = "m", models_status: int = 200
    ) -> None:
        posts: list[dict[str, Any]] = []
        self.posts = posts

        class Handler(BaseHTTPRequestHandler):
            def _send(self, status: int, body: Any) -> None:
                raw = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_GET(self):  # noqa: N802 - the stdlib's name
                if self.path == "/v1/models":
                    self._send(
                        models_status,
                        {"object": "list", "data": [{"id": model}]}
                        if models_status == 200
                        else {"error": {"message": "no", "type": "auth", "code": models_status}},
                    )
                else:
                    self._send(404, {"error": {"message": "not found"}})

            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                posts.append(body)
                self._send(*answer(body))

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()

    def __enter__(self) -> StubServer:
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def completion(text: Any = "4", finish_reason: Any = "stop") -> dict[str, Any]:
    """A /v1/completions answer of one choice."""
    return {
        "id": "cmpl-1",
        "object": "text_completion",
        "model": "m",
        "choices": [{"index": 0, "text": text, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
    }
