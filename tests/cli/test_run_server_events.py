"""A server's process, log and health through `specdec-eval run`: `--serve-cmd` starts the server and stops it,
`--server-log` / `--server-log-format` read its log's known lines as the run's events, `--stall-floor` /
`--stall-factor` end a run whose server stopped answering; `run` prints why the server failed it after its verdict,
and `report` and `compare` show the same line and the server's events like our engine's."""

from __future__ import annotations

import json
import os
import shlex
import socket
import sys
import time
from pathlib import Path

import pytest
from specdec_eval.results import store

from ..cli_helpers import run_cli
from ..fake_server_helpers import HangingServer
from ..peers.server.test_log_tables import SEED_LOG

ARGS = ("run", "--model", "tiny", "--tasks", "gsm8k_smoke", "--no-reference", "--concurrency", "1")
CAUSE = "executor loop died: Sampling failed, log line 11"


def _only_run(root: Path) -> store.Run:
    (folder,) = [p for p in root.iterdir() if p.is_dir()]
    return store.Run(folder)


def test_a_hanging_server_fails_the_run_quickly_and_run_report_and_compare_say_why(capsys, tmp_path):
    """TensorRT-LLM's executor loop died (its log says so) and later requests hang while /health answers 200: the
    run ends within the stall window, not timeout x retries x documents, and every reader names the log line."""
    log = tmp_path / "server.log"
    log.write_text(SEED_LOG)
    clean_log = tmp_path / "clean.log"
    clean_log.write_text("")
    server_flags = (
        "--server-log-format",
        "trtllm",
        "--stall-floor",
        "1",
        "--kv-drain-timeout",
        "0",
        "--request-timeout",
        "60",
        "--request-retries",
        "3",
    )
    with HangingServer(answer_first=1000) as server:  # run A: a server that answers
        code, out, err = run_cli(
            capsys,
            *ARGS,
            "--out",
            str(tmp_path / "a"),
            "--endpoint",
            server.url,
            "--server-log",
            str(clean_log),
            *server_flags,
        )
    assert code == 0, err
    assert "server:" not in out
    with HangingServer(answer_first=2) as server:  # run B: its third request never comes back
        started = time.perf_counter()
        code, out, err = run_cli(
            capsys,
            *ARGS,
            "--out",
            str(tmp_path / "b"),
            "--endpoint",
            server.url,
            "--server-log",
            str(log),
            *server_flags,
        )
        took = time.perf_counter() - started
    assert code == 1, err
    assert took < 30.0  # without the watch: 60 s x 4 attempts for each unanswered document
    verdict_at = out.index("run FAIL")
    failure = out[verdict_at:].splitlines()[1]  # printed after the verdict
    assert failure.startswith("server: the server stopped answering: ") and CAUSE in failure
    assert "/health answers 200" in failure and "documents unanswered)" in failure
    assert "engine_dead 1" in out and "spec_state_leak 1" in out and "server_stalled 1" in out

    run_a, run_b = _only_run(tmp_path / "a"), _only_run(tmp_path / "b")
    summary = json.loads((run_b.path / "summary.json").read_text())
    assert summary["verdict"] == "FAIL" and summary["server_failure"] == failure
    from_log = [e for e in run_b.events() if e.get("source") == "server_log"]
    assert [e["type"] for e in from_log][:4] == ["warmup_oom", "spec_state_leak", "forward_error", "engine_dead"]
    assert run_b.manifest()["engine"]["server"]["log_format"] == "trtllm"
    lines = len(SEED_LOG.splitlines())
    assert run_b.manifest()["engine"]["server"]["log_lines_read"] == lines
    assert f"server log: {lines} lines read ({log.resolve()})" in err

    code, out, err = run_cli(capsys, "report", str(run_b.path), "--out", str(tmp_path / "report.html"))
    assert code == 0, err
    assert CAUSE in out
    code, out, err = run_cli(capsys, "compare", str(run_a.path), str(run_b.path))
    assert "B's server: the server stopped answering" in out and CAUSE in out
    assert "engine_dead 0 -> 1 (+1)" in out


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (("--serve-cmd", "serve-it"), "--serve-cmd needs --endpoint (where the server answers)"),
        (("--server-log", "x.log", "--serve-cmd", "serve-it"), "--serve-cmd and --server-log need --endpoint"),
        (
            ("--endpoint", "http://127.0.0.1:9", "--baseline-serve-cmd", "serve-it"),
            "--baseline-serve-cmd and --baseline-server-log need --baseline-endpoint",
        ),
        (("--endpoint", "http://127.0.0.1:9", "--serve-cmd", "'unclosed"), "cannot read the server command"),
    ],
)
def test_server_flags_without_their_server_are_one_line_errors(capsys, tmp_path, flags, said):
    code, out, err = run_cli(capsys, *ARGS, "--out", str(tmp_path / "runs"), *flags)
    assert code == 2
    assert said in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


@pytest.mark.parametrize("given", ["missing", "folder", "fifo", "/dev/zero"])
def test_a_server_log_that_is_not_a_regular_file_is_refused_in_one_line(capsys, tmp_path, given):
    """/dev/zero grew the run to gigabytes, a FIFO blocked it, a folder or a missing path let a verdict pass with no
    event checked. A missing log is allowed only where --serve-cmd creates it."""
    path = {"missing": tmp_path / "none.log", "folder": tmp_path, "fifo": tmp_path / "fifo"}.get(given, given)
    if given == "fifo":
        os.mkfifo(path)
    said = {
        "missing": "not found (a log to follow must exist; --serve-cmd creates one)",
        "folder": "is a folder, not a regular file",
        "fifo": "is a named pipe, not a regular file",
        "/dev/zero": "is a character device, not a regular file",
    }[given]
    code, out, err = run_cli(
        capsys,
        *ARGS,
        "--out",
        str(tmp_path / "runs"),
        "--endpoint",
        "http://127.0.0.1:9",
        "--served-model",
        "m",
        "--server-log",
        str(path),
    )
    assert code == 2, err
    assert err.strip() == f"specdec-eval: error: server log {path}: {said}"
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _served_run(capsys, tmp_path: Path, name: str, serve_flags: str) -> tuple[int, str, store.Run, float]:
    port = _free_port()
    command = (
        f"{shlex.quote(sys.executable)} -m specdec_eval.cli.main serve --model tiny --device-memory 256MiB "
        f"--spec eagle3 {serve_flags} --port {port}"
    )
    started = time.perf_counter()
    code, out, err = run_cli(
        capsys,
        *ARGS,
        "--out",
        str(tmp_path / name),
        "--endpoint",
        f"http://127.0.0.1:{port}",
        "--serve-cmd",
        command,
        "--spec",
        "eagle3",
        "--draft-len",
        "3",
        "--max-output-len",
        "16",
        "--startup-timeout",
        "600",
        "--stall-floor",
        "30",
    )
    return code, out + err, _only_run(tmp_path / name), time.perf_counter() - started


@pytest.mark.slow
def test_the_seed_through_http_unguarded_server_fails_guarded_passes(capsys, tmp_path):
    """The seed as a TensorRT-LLM user meets it: a warmup OOM leaves the spec-dec state behind unless the guard
    restores it. Both servers are started by `run --serve-cmd`; their events come from their logs."""
    code, out, run, took = _served_run(
        capsys, tmp_path, "unguarded", "--inject warmup_oom --spec-guard none --warmup on"
    )
    assert code == 1, out
    types = {e["type"] for e in run.events() if e.get("source") == "server_log"}
    assert {"warmup_oom", "spec_state_leak"} <= types
    assert "spec_state_restored" not in types
    assert took < 300.0
    assert "--spec-guard none" in run.manifest()["engine"]["server"]["command"]

    code, out, run, _ = _served_run(
        capsys, tmp_path, "guarded", "--inject warmup_oom --spec-guard template --warmup on"
    )
    assert code == 0, out
    types = {e["type"] for e in run.events() if e.get("source") == "server_log"}
    assert {"warmup_oom", "spec_state_restored"} <= types and "spec_state_leak" not in types
