"""Following a server's log while it is written (peers/server/log/follower.py): from its first byte, lines
completed later, which table reads it (named, from the server's identity, or recognised from the content), and
secrets scrubbed before anything is kept."""

from __future__ import annotations

import os
import time

import pytest
from specdec_eval.peers.server.log import ServerLog, format_of_server
from specdec_eval.peers.server.log.follower import MAX_LINE_BYTES
from specdec_eval.workers.events import EventLog, event_line

from specdec_eval.errors import UserError
from specdec_eval.redaction import redact_text

from .test_log_tables import SEED_LOG


def _wait(predicate, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_a_log_written_while_it_is_followed(tmp_path):
    path = tmp_path / "server.log"
    with ServerLog(path, poll_s=0.02) as log:  # the file does not exist yet: the server has not started
        time.sleep(0.1)
        with path.open("a") as f:
            f.write(SEED_LOG[:200])  # half a line at the end
            f.flush()
            _wait(lambda: log.num_lines >= 1)
            assert [e["type"] for e in log.events()] == []  # the OOM line is not complete yet
            f.write(SEED_LOG[200:])
        log.catch_up()
        assert [e["type"] for e in log.events()] == ["warmup_oom", "spec_state_leak", "forward_error", "engine_dead"]
        assert log.log_format[0] == "trtllm" and "recognised in the log" in log.log_format[1]
        assert log.first_fatal()["line"] == 11
        assert all(isinstance(e["ts"], float) and e["rank"] == 0 for e in log.events())


def test_the_last_line_without_a_newline_is_read_at_stop(tmp_path):
    path = tmp_path / "server.log"
    path.write_text("[x] [TRT-LLM] [E] Error in event loop: Sampling failed")
    log = ServerLog(path, "trtllm", poll_s=0.02).start()
    log.stop()
    assert [e["type"] for e in log.events()] == ["engine_dead"]


def test_which_table_applies(tmp_path):
    path = tmp_path / "server.log"
    path.write_text("INFO:     " + event_line(EventLog().emit("warmup_oom", phase="general", num_tokens=8)) + "\n")
    with ServerLog(path, poll_s=0.02) as log:
        log.catch_up()
        assert log.log_format[0] == "specdec-eval"  # recognised: our event-line prefix
        log.choose("vllm", "from the server's identity (owned_by 'vllm')")
        assert log.log_format == ("vllm", "from the server's identity (owned_by 'vllm')")
        assert log.events() == []  # vLLM's table does not know our lines
    named = ServerLog(path, "sglang")
    named.choose("vllm", "identity")  # a table the user named wins over the identity
    assert named.log_format == ("sglang", "named")
    assert ServerLog(tmp_path / "none.log").log_format[0] == "generic"
    assert format_of_server("vllm", "uvicorn") == "vllm"
    assert format_of_server(None, "specdec-eval/0.1") == "specdec-eval"
    assert format_of_server("tensorrt_llm", None) == "trtllm" and format_of_server("me", "uvicorn") is None
    with pytest.raises(UserError, match="unknown server log format 'tgi'"):
        ServerLog(path, "tgi")


def test_secrets_never_reach_the_events(tmp_path):
    path = tmp_path / "server.log"
    path.write_text(
        "args: --api-key sk-123 --endpoint http://bob:pw@h/v1\n"
        "[x] [TRT-LLM] [E] Error in event loop: token sk-123 refused\n"
    )
    with ServerLog(path, redact=lambda line: redact_text(line, ("sk-123",)), poll_s=0.02) as log:
        log.catch_up()
        (event,) = log.events()
        assert "sk-123" not in str(event) and event["error"] == "token *** refused"
        assert log.tail(2)[0] == "args: --api-key *** --endpoint http://***@h/v1"


def test_the_run_line_names_a_dead_engine_from_its_log(tmp_path):
    from specdec_eval.peers.server.failure import server_failure_line

    path = tmp_path / "server.log"
    path.write_text(SEED_LOG)
    with ServerLog(path, "trtllm", poll_s=0.02) as log:
        log.catch_up()
        assert server_failure_line(log.events()) == "server: executor loop died: Sampling failed, log line 11"
    assert server_failure_line([{"type": "warmup_oom", "source": "server_log", "fatal": False}]) is None


def test_the_run_line_names_a_failing_log_line_or_metric_leak_never_our_own_engines_events():
    from specdec_eval.peers.server.failure import server_failure_line

    ours = {"type": "kv_block_leak", "num_blocks": 3}  # a local run's own engine: no server failed it
    assert server_failure_line([ours, {"type": "spec_state_leak"}]) is None
    leak = {"type": "spec_state_leak", "source": "server_log", "line": 8, "message": "spec-dec state leaked"}
    assert server_failure_line([ours, leak]) == "server: spec-dec state leaked, log line 8"
    metric = {"type": "kv_leak", "message": "KV usage stayed at 0.99% after the run drained"}
    assert server_failure_line([metric]) == "server: KV usage stayed at 0.99% after the run drained"


def test_a_log_that_is_not_a_regular_file_is_not_read_and_says_so(tmp_path):
    """A FIFO blocked the reader 10 s; /dev/zero grew it to gigabytes: both are refused on the opened descriptor."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path, kind in ((fifo, "a named pipe"), ("/dev/zero", "a character device")):
        log = ServerLog(path, poll_s=0.02).start()
        _wait(lambda log=log: log.problem is not None)
        started = time.perf_counter()
        log.stop()
        assert time.perf_counter() - started < 1.0
        assert log.record() == {"log_lines_read": 0, "log_problem": f"is {kind}, not a regular file: not read"}


def test_a_long_line_keeps_its_start_only_and_lines_are_counted(tmp_path):
    path = tmp_path / "server.log"
    path.write_bytes(b"first\n" + b"x" * (3 * MAX_LINE_BYTES) + b"\n" + SEED_LOG.encode())
    with ServerLog(path, "trtllm", poll_s=0.02) as log:
        log.catch_up()
    lines = SEED_LOG.count("\n") + 2 + (not SEED_LOG.endswith("\n"))
    assert log.record() == {"log_lines_read": lines, "log_lines_cut": 1}
    assert [e["type"] for e in log.events()] == ["warmup_oom", "spec_state_leak", "forward_error", "engine_dead"]
    assert max(len(line) for line in log.tail(40)) <= MAX_LINE_BYTES + 64
