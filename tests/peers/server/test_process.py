"""Starting the server ourselves (peers/server/process.py): its output captured into a log, a wait until it
answers with the log's last lines when it dies first or never answers, a stop by SIGTERM then SIGKILL, and the
command recorded with its secrets scrubbed. The server here is a few lines of Python (real processes: slow)."""

from __future__ import annotations

import json
import shlex
import sys
import tempfile
import time

import pytest
from specdec_eval.peers.server.process import ServerCommand, ServerProcess, ServerStartFailed

from ...llama_server import free_port

SERVER = """
import http.server, os, signal, sys, time
port, delay, mode = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
print("starting with key", os.environ.get("MY_API_KEY"), flush=True)
if mode == "die":
    print("boom: unknown flag --nope", flush=True)
    sys.exit(3)
time.sleep(delay)
if mode == "stubborn":
    signal.signal(signal.SIGTERM, lambda *a: print("ignoring SIGTERM", flush=True))
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
"""


def _server(tmp_path, mode: str = "ok", delay: float = 0.3) -> tuple[ServerProcess, str]:
    script = tmp_path / "server.py"
    script.write_text(SERVER)
    port = free_port()
    command = f"MY_API_KEY=sekret-1 {shlex.quote(sys.executable)} {script} {port} {delay} {mode}"
    return ServerProcess(command, tmp_path / "logs" / "server.log"), f"http://127.0.0.1:{port}"


def test_the_command_is_recorded_without_its_secrets():
    command = ServerCommand.parse("HF_TOKEN=hf-9 trtllm-serve m --api-key k-1 --endpoint http://u:pw@h:1 --port 8")
    assert command.env == (("HF_TOKEN", "hf-9"),) and command.argv[0] == "trtllm-serve"
    assert command.recorded == "'HF_TOKEN=***' trtllm-serve m --api-key '***' --endpoint 'http://***@h:1' --port 8"
    assert set(command.secrets) == {"hf-9", "k-1", "u:pw"}


@pytest.mark.slow
def test_it_starts_answers_and_stops_on_sigterm(tmp_path):
    process, url = _server(tmp_path)
    with process:
        took = process.wait_ready(url, timeout_s=30, poll_s=0.05)
        assert 0.2 < took < 30 and process.exit_code() is None
    assert process.exit_code() == -15  # SIGTERM ended it
    assert "starting with key sekret-1" in (tmp_path / "logs" / "server.log").read_text()  # the log is the output


@pytest.mark.slow
def test_one_that_ignores_sigterm_is_killed_after_the_grace_period(tmp_path):
    process, url = _server(tmp_path, "stubborn")
    process.start()
    process.wait_ready(url, timeout_s=30, poll_s=0.05)
    start = time.monotonic()
    assert process.stop(grace_s=1.0) == -9
    assert time.monotonic() - start >= 1.0
    assert "ignoring SIGTERM" in (tmp_path / "logs" / "server.log").read_text()


@pytest.mark.slow
def test_one_that_dies_first_says_so_with_its_last_lines_scrubbed(tmp_path):
    process, url = _server(tmp_path, "die")
    process.start()
    with pytest.raises(ServerStartFailed) as failed:
        process.wait_ready(url, timeout_s=30, poll_s=0.05)
    text = str(failed.value)
    assert text.splitlines()[0].startswith("the server exited with status 3 before it answered: 'MY_API_KEY=***'")
    assert "  | boom: unknown flag --nope" in text and "starting with key ***" in text and "sekret-1" not in text


@pytest.mark.slow
def test_one_that_never_answers_times_out_and_is_stopped(tmp_path):
    process, url = _server(tmp_path, delay=60)
    process.start()
    with pytest.raises(ServerStartFailed, match="did not answer within 1 s"):
        process.wait_ready(url, timeout_s=1, poll_s=0.05)
    assert process.exit_code() is not None  # stopped, not left running


@pytest.mark.slow
def test_a_captured_log_is_removed_at_the_end_and_its_lines_are_counted(tmp_path, monkeypatch):
    """Without --server-log the server's output went to a file in the system's temp folder that stayed there, one
    per run, with whatever the server printed (keys included). Now it lives while the run does."""
    from specdec_eval.peers.server.watch import CAPTURED, ServerWatch

    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    script = tmp_path / "server.py"
    script.write_text(SERVER)
    port = free_port()
    command = f"{shlex.quote(sys.executable)} {script} {port} 0.1 ok --api-key sekret-2"
    watch = ServerWatch(f"http://127.0.0.1:{port}", serve_cmd=command, startup_timeout_s=30)
    try:
        (captured,) = temp.iterdir()
        assert (captured / "server.log").is_file()
    finally:
        watch.close()
    record = watch.record()
    assert not any(temp.iterdir()) and record["log"] == CAPTURED and record["log_lines_read"] == 1
    assert "sekret-2" not in json.dumps(record) and "--api-key '***'" in record["command"]
