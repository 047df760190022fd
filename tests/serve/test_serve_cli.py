"""`specdec-eval serve` as a command: its help and defaults, one-line user errors, and (slow, real processes) a clean
SIGTERM with requests in flight, and `--gpus 2` as a two-rank torchrun job that answers like one process."""

from __future__ import annotations

import inspect
import re
import signal
import socket
import subprocess
import sys
import threading

import httpx
import pytest
from specdec_eval.cli import serve as serve_cmd
from specdec_eval.cli.main import app, main
from specdec_eval.workers.config import SamplingParams
from typer.testing import CliRunner

from ..serve_helpers import sse_events, tiny_engine

CLI = [sys.executable, "-m", "specdec_eval.cli.main", "serve"]
TINY = ["--model", "tiny", "--device", "cpu", "--device-memory", "256MiB", "--port", "0", "--log-level", "warning"]


def test_help_has_examples_and_binds_localhost_by_default():
    result = CliRunner().invoke(app, ["serve", "--help"], terminal_width=200)
    assert result.exit_code == 0
    for words in (
        "Examples:",
        "specdec-eval serve --gpus 2",
        "--api-key",
        "SPECDEC_EVAL_API_KEY",
        "--max-queue",
        "--max-request-bytes",
        "--served-model-name",
        "--kv-cache",
        "--spec",
        "127.0.0.1",
    ):
        assert words in result.output, words
    assert inspect.signature(serve_cmd.serve).parameters["host"].default == "127.0.0.1"


@pytest.mark.parametrize(
    "args, words",
    [
        (["--max-queue", "0"], "--max-queue must be at least 1"),
        (["--max-request-bytes", "lots"], "cannot read memory size"),
        (["--tp", "2"], "--tp > 1 needs --gpus"),
        (["--port", "70000"], "--port must be in 0..65535"),
        (["--kv-cache", "v9"], "'v9' is not one of 'v1', 'v2'"),
    ],
)
def test_user_errors_are_one_line_and_status_2(args, words, capsys):
    with pytest.raises(SystemExit) as caught:
        main(["serve", "--model", "tiny", *args])
    assert caught.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("specdec-eval: error:") and words in err and "\n" not in err


def _serve_on_a_busy_port(capsys, *args: str) -> tuple[int, str, int]:
    """`serve ARGS` on a port that is taken on every interface (so a check that regressed fails fast at the bind
    instead of serving)."""
    with socket.create_server(("0.0.0.0", 0)) as busy:
        port = busy.getsockname()[1]
        with pytest.raises(SystemExit) as caught:
            main(["serve", "--model", "tiny", "--device", "cpu", "--port", str(port), *args])
    return caught.value.code, capsys.readouterr().err.strip(), port


def test_a_port_in_use_is_one_line_and_status_2(capsys):
    code, err, port = _serve_on_a_busy_port(capsys)
    assert code == 2 and err == (
        f"specdec-eval: error: cannot listen on 127.0.0.1:{port}: the port is in use "
        "(another server?); pick another --port, or --port 0 for any free one"
    )


@pytest.mark.parametrize("key, what", [("cl\u00e9", "U+00E9"), ("two words", "U+0020"), ("tab\t", "U+0009")])
def test_an_api_key_no_client_could_send_is_refused_at_start(capsys, key, what):
    """HTTP headers carry ASCII reliably, nothing else (clients encode other characters differently), so a key
    like this could never be matched: refused before the model loads."""
    code, err, _ = _serve_on_a_busy_port(capsys, "--api-key", key)
    assert code == 2 and err.startswith("specdec-eval: error: --api-key must be printable ASCII without spaces")
    assert err.endswith(f"it holds {what}") and "\n" not in err


@pytest.mark.parametrize(
    "args, words",
    [
        (["--tp", "0"], "--tp must be at least 1, got 0"),
        (["--host", ""], "--host is empty; name the address to bind"),
        (["--host", "  "], "--host is empty"),
        (["--log-level", "bogus"], "--log-level must be one of critical, error, warning, info, debug, trace"),
        (["--grace", "nan"], "--grace must be a finite number of seconds >= 0, got nan"),
        (["--grace", "inf"], "--grace must be a finite number"),
        (["--rank-timeout", "-5"], "--rank-timeout must be a finite number of seconds > 0, got -5.0"),
        (["--rank-timeout", "nan"], "--rank-timeout must be a finite number"),
        (["--max-request-bytes", "0"], "--max-request-bytes must be at least 1 byte, got '0'"),
        (["--api-key", ""], "--api-key is empty"),
    ],
)
def test_bad_server_options_are_one_line_before_the_bind(args, words, capsys):
    """Each refused before the port is bound (an empty --host would have bound every interface)."""
    code, err, _ = _serve_on_a_busy_port(capsys, *args)
    assert code == 2 and err.startswith("specdec-eval: error:") and words in err and "\n" not in err


def test_an_empty_key_variable_is_refused_not_taken_for_no_key(capsys, monkeypatch):
    """click reads SPECDEC_EVAL_API_KEY= as unset: the server started without authentication and said nothing."""
    monkeypatch.setenv("SPECDEC_EVAL_API_KEY", "")
    code, err, _ = _serve_on_a_busy_port(capsys)
    assert code == 2 and err.startswith(
        "specdec-eval: error: --api-key is empty (also when it comes from $SPECDEC_EVAL_API_KEY)"
    )


def test_an_upper_case_log_level_is_uvicorns_lower_case_one(capsys):
    code, err, port = _serve_on_a_busy_port(capsys, "--log-level", "WARNING")
    assert code == 2 and "the port is in use" in err  # got past the log level to the bind


class Served:
    """A `specdec-eval serve` subprocess: its URL from the line it prints, its stderr kept."""

    def __init__(self, args: list[str], timeout_s: float = 240) -> None:
        self.proc = subprocess.Popen(CLI + TINY + args, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self.url = None
        for line in self.proc.stderr:
            self.lines.append(line)
            if m := re.search(r"listening on (http://\S+)", line):
                self.url = m.group(1)
                break
        assert self.url, "".join(self.lines)
        threading.Thread(target=lambda: self.lines.extend(self.proc.stderr), daemon=True).start()

    def stop(self, timeout_s: float = 120) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout_s)


@pytest.mark.slow
@pytest.mark.parametrize("grace", ["30", "0"], ids=["drained", "aborted"])
def test_sigterm_finishes_or_aborts_in_flight_requests_and_exits_0(grace):
    served = Served(["--grace", grace])
    assert served.url.startswith("http://127.0.0.1:")
    body = {"prompt": "hi", "max_tokens": 120, "ignore_eos": True, "temperature": 0, "stream": True}
    received: list[str] = []
    with httpx.stream("POST", served.url + "/v1/completions", json=body, timeout=120) as r:
        lines = r.iter_lines()
        received.append(next(lines))  # the request is in flight
        code = served.stop()
        try:
            received.extend(lines)
        except httpx.HTTPError:  # aborted: the server may close the connection mid-stream
            pass
    events = sse_events([line for line in received if line])
    assert code == 0, "".join(served.lines)
    if grace == "30":  # drained: the answer is complete
        assert events[-1] == "[DONE]" and events[-2]["choices"][0]["finish_reason"] == "length"
        assert sum(len(e["choices"][0]["token_ids"]) for e in events[:-1]) == 120
    else:  # aborted at once: the stream ends early with an error event
        assert events[-1] == "[DONE]" and events[-2]["error"]["code"] == "unavailable"
        assert sum(len(e["choices"][0]["token_ids"]) for e in events[:-2]) < 120
    assert "Traceback" not in "".join(served.lines), "".join(served.lines)


@pytest.mark.slow
def test_two_rank_job_answers_like_one_process(tiny):
    want = tiny_engine(tiny).generate(["hello", "world", "again"], SamplingParams(max_new_tokens=8))
    served = Served(["--gpus", "2", "--tp", "1"])  # two data-parallel replicas
    try:
        body = {"prompt": ["hello", "world", "again"], "max_tokens": 8, "temperature": 0}
        answer = httpx.post(served.url + "/v1/completions", json=body, timeout=120).json()
        assert [c["token_ids"] for c in answer["choices"]] == [o.token_ids for o in want]
        models = httpx.get(served.url + "/v1/models", timeout=30).json()
        assert models["data"][0]["id"] == "tiny"
    finally:
        code = served.stop()
    assert code == 0, "".join(served.lines)
    assert "2 CPU ranks over gloo" in "".join(served.lines)
