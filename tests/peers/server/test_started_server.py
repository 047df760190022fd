"""The server the run starts is the one that answers (peers/server/process.py, port_owner.py, watch.py):
a URL that already answers is refused before anything starts, naming what answers; a port held by a process the
started server does not own is refused once it answers; and the started server is watched for the whole run: its
exit, while another process goes on answering its port, is a `server_exited` event with its status and last lines,
which fails the run. Fake servers: a few lines of Python each (handoff_server.py)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
from specdec_eval.peers.client.config import EndpointConfig
from specdec_eval.peers.client.engine import EndpointEngine
from specdec_eval.peers.server.failure import server_failure_line
from specdec_eval.peers.server.port_owner import check_owner
from specdec_eval.peers.server.process import ServerStartFailed
from specdec_eval.peers.server.watch import ServerWatch
from specdec_eval.workers.config import SamplingParams

from specdec_eval.errors import UserError

from ...cli_helpers import run_cli
from ...llama_server import free_port

SCRIPT = Path(__file__).with_name("handoff_server.py")


def _command(port: int, mode: str, **env: str) -> str:
    words = [f"{k}={v}" for k, v in env.items()] + [sys.executable, str(SCRIPT), str(port), mode]
    return shlex.join(words)


def _wait_answering(url: str, timeout_s: float = 20.0) -> None:
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/health", timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{url} did not answer")


@pytest.fixture
def stale():
    """An old server answering on a port: what a run started on that port would otherwise judge."""
    port = free_port()
    old = subprocess.Popen([sys.executable, str(SCRIPT), str(port), "ok"], stdout=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_answering(url)
        yield port, url, old
    finally:
        old.terminate()
        old.wait(10)


def test_a_url_that_already_answers_is_refused_before_the_command_starts(stale, tmp_path):
    port, url, _ = stale
    marker = tmp_path / "started"
    command = shlex.join([sys.executable, "-c", f"open({str(marker)!r}, 'w')"])
    with pytest.raises(UserError) as refused:
        ServerWatch(url, serve_cmd=command, startup_timeout_s=20)
    said = str(refused.value)
    assert "\n" not in said and f"{url} already answers before the server command started" in said
    assert "model 'tiny'" in said and "Server: BaseHTTP" in said  # what answers there, named
    assert not marker.exists()  # the command never ran


def test_the_run_refuses_it_in_one_line_with_exit_status_2(stale, tmp_path, capsys):
    """On main the started server died ("Address already in use"), the old one answered, and the run exited 0."""
    port, url, _ = stale
    code, out, err = run_cli(
        capsys,
        "run",
        "--serve-cmd",
        _command(port, "busy"),
        "--endpoint",
        url,
        "--model",
        "tiny",
        "--tasks",
        "gsm8k_smoke",
        "--no-reference",
        "--out",
        str(tmp_path / "runs"),
    )
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "already answers" in lines[0], err
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").glob("2*"))


def test_a_port_held_by_a_process_the_server_does_not_own_is_refused(tmp_path):
    """The command starts a server in a session of its own and stays up itself: the URL answers, the started
    process is alive, and yet nothing it owns holds the port."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    watch = None
    try:
        with pytest.raises(ServerStartFailed) as refused:
            watch = ServerWatch(url, serve_cmd=_command(port, "detached"), startup_timeout_s=20, stop_grace_s=2)
    finally:
        if watch is not None:
            watch.close()
        holder = check_owner(url, os.getpid())
        for pid in holder.pids:  # the detached server: in no session the test owns, so stopped here
            os.kill(pid, 15)
    first = str(refused.value).splitlines()[0]
    assert f"{url} answers, but port {port} is held by pid" in first
    assert "not by the server the command started" in first and "handoff_server.py" in first
    assert holder.ours is False


def test_the_owner_of_a_port_is_found_among_the_started_processes_descendants(stale):
    port, url, old = stale
    assert check_owner(url, old.pid).ours is True
    assert check_owner(url, os.getpid()).ours is True  # the test process started it
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        found = check_owner(url, other.pid)
        assert found.ours is False and f"pid {old.pid}" in found.why
    finally:
        other.kill()
        other.wait()
    assert check_owner("http://10.255.255.1:9", old.pid).ours is None  # not this machine: not checked, said so


@pytest.mark.parametrize("signal_name, how", [(None, "status 3"), ("SIGKILL", "signal SIGKILL")])
def test_a_started_server_that_exits_while_another_answers_fails_the_run(tiny, tmp_path, signal_name, how):
    """The started process hands its socket to a child and exits once a request was answered: every answer came,
    from the child; the run's end finds the started server gone, and its exit is a failing event."""
    port = free_port()
    env = {"ANSWERED_FILE": str(tmp_path / "answered"), **({"SIGNAL": signal_name} if signal_name else {})}
    config = EndpointConfig(
        url=f"http://127.0.0.1:{port}",
        model="tiny",
        serve_cmd=_command(port, "handoff", **env),
        startup_timeout_s=20,
        stop_grace_s=2,
        max_retries=0,
        kv_drain_timeout_s=0,
    )
    engine = EndpointEngine(config, tiny[1])
    try:
        assert engine.identity.server["port_owner"].startswith(f"port {port} is held by pid")
        out = engine.generate(["q"], SamplingParams(max_new_tokens=4))[0]
        assert out.finish_reason == "stop" and out.text == " 4"  # answered: not by the started process at the end
        deadline = time.monotonic() + 10
        while engine.watch.exited() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        events = engine.collect_events()
    finally:
        engine.close()
    assert check_owner(config.url, os.getpid()).ours is None  # what it started was stopped too: nothing listens
    (exited,) = [e for e in events if e["type"] == "server_exited"]
    assert f"exited during the run with {how}" in exited["reason"]
    assert exited["signal"] == signal_name and (exited["exit_status"] == 3) == (signal_name is None)
    assert any("the started process leaves now" in line for line in exited["log_tail"])
    line = server_failure_line(events)
    assert line.startswith(f"server: the server the run started exited during the run with {how}")
    assert engine.collect_events().count(exited) == 1  # said once
