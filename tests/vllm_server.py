"""vLLM's CPU build as a real peer for the tests: servers over the exported SmolLM2 (scripts/setup_vllm.sh makes the
venv and the folder), plain or speculating (eagle3 with the shipped head, ngram), started on free ports, waited for
and stopped. A start costs 35-100 s and a few GiB, so `vllm_servers` (one per session) starts each kind on first use
and keeps at most MAX_LIVE alive, stopping the one used least recently to make room. Every server records its
start-up seconds and resident size, which the report states.

The eagle3 server is the bug-class matrix's speculating server too: it loads the test-only plugin, reading the live
class from the session's class file, empty (vLLM untouched) except while `vllm_matrix_servers` lends it to the matrix,
whose last class kills its engine core; the matrix then retires it. Tests that use these servers run last in the
session (tests/conftest.py), the matrix last of all, so each server starts once.

Tests that need vLLM call `require_vllm()`: it skips with the reason when the setup is missing, and fails instead
under CI=true, where the peer must be there (as tests/llama_server.py does for llama.cpp)."""

from __future__ import annotations

import os
import subprocess
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import pytest
from specdec_eval.evals.selftest.vllm_mutants import MatrixServers, VllmSetup
from specdec_eval.peers.profiles.vllm import SERVED_MODEL, VLLMServeCommand
from specdec_eval.peers.server.process import ServerProcess

from .llama_server import free_port

REPO = Path(__file__).resolve().parents[1]
HEAD = REPO / "workers" / "spec" / "heads" / "smollm2-eagle3"
DRAFT_LEN = 3
MAX_LIVE = 2
START_TIMEOUT_S = 420.0  # 35-100 s measured alone; more while the other slot decodes


def vllm_venv() -> Path:
    return Path(os.environ.get("VLLM_VENV", REPO / ".venv-vllm"))


def vllm_python() -> str:
    return str(vllm_venv() / "bin" / "python")


def vllm_model_dir() -> Path:
    return Path(os.environ.get("VLLM_MODEL_DIR", vllm_venv() / "smollm2-hf"))


def vllm_missing() -> str | None:
    """Why vLLM cannot be served here, or None."""
    if not (vllm_venv() / ".vllm-installed").is_file():
        return f"vLLM is not set up in {vllm_venv()} (make setup-vllm)"
    if not (vllm_model_dir() / "config.json").is_file():
        return f"no exported SmolLM2 in {vllm_model_dir()} (make setup-vllm)"
    return None


def require_vllm() -> None:
    reason = vllm_missing()
    if reason is None:
        return
    if os.environ.get("CI", "").lower() in ("true", "1", "yes"):
        pytest.fail(reason + " (CI must run the vLLM tests)")
    pytest.skip(reason)


def serve_command(method: str | None, port: int | None = None, **overrides) -> VLLMServeCommand:
    """The command for one server: plain (None), "eagle3" (the shipped head) or "ngram"; K = DRAFT_LEN."""
    return VLLMServeCommand(
        python=vllm_python(),
        model_dir=str(vllm_model_dir()),
        port=port or free_port(),
        method=method,
        head=str(HEAD) if method == "eagle3" else None,
        draft_len=DRAFT_LEN,
        **overrides,
    )


def matrix_setup() -> VllmSetup:
    """The matrix's view of this setup: its builder makes the eagle3 server's command, plugin variable included."""
    return VllmSetup(venv=str(vllm_venv()), model_dir=str(vllm_model_dir()), head=str(HEAD), draft_len=DRAFT_LEN)


def group_rss_mib(pid: int) -> float:
    """Resident size of a server and every process it started (vLLM's engine core is a child), in MiB."""
    out = subprocess.run(["ps", "-o", "rss=", "-g", str(os.getpgid(pid))], capture_output=True, text=True).stdout
    return sum(int(x) for x in out.split()) / 1024


@dataclass
class VLLMServer:
    name: str
    command: VLLMServeCommand
    process: ServerProcess
    log_path: Path
    startup_s: float
    rss_mib: float

    @property
    def url(self) -> str:
        return self.command.url


def start_server(name: str, method: str | None, log_dir: Path, class_file: Path) -> VLLMServer:
    """One server; eagle3's loads the plugin reading `class_file` (the matrix's spec server)."""
    cmd = serve_command(method)
    line = matrix_setup().serve_cmd(cmd.port, class_file) if method == "eagle3" else str(cmd)
    log = log_dir / f"vllm-{name}.log"
    process = ServerProcess(line, log).start()
    try:
        startup_s = process.wait_ready(cmd.url, timeout_s=START_TIMEOUT_S)
    except BaseException:
        process.stop()
        raise
    time.sleep(1)  # the engine core's buffers are in place once the API answers; let the RSS settle
    return VLLMServer(name, cmd, process, log, startup_s, group_rss_mib(process.pid))


class VLLMServers:
    """The session's servers by kind ("plain", "eagle3", "ngram"), at most MAX_LIVE at once."""

    KINDS = {"plain": None, "eagle3": "eagle3", "ngram": "ngram"}

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.class_file = log_dir / "class"  # the plugin's live class in the eagle3 server: none while empty
        self.class_file.write_text("")
        self.live: OrderedDict[str, VLLMServer] = OrderedDict()
        self.started: list[VLLMServer] = []  # every start, for the report

    def get(self, kind: str) -> VLLMServer:
        if kind in self.live:
            self.live.move_to_end(kind)
            return self.live[kind]
        while len(self.live) >= MAX_LIVE:
            _, oldest = self.live.popitem(last=False)
            oldest.process.stop()
        server = start_server(kind, self.KINDS[kind], self.log_dir, self.class_file)
        self.live[kind] = server
        self.started.append(server)
        return server

    def make_room(self, free_slots: int) -> None:
        """Stop servers so that a test may start `free_slots` of its own (through `run --serve-cmd`)."""
        while self.live and len(self.live) > MAX_LIVE - free_slots:
            _, oldest = self.live.popitem(last=False)
            oldest.process.stop()

    def retire(self, kind: str) -> None:
        """Stop a server that must not serve again (the matrix's last class kills eagle3's engine core)."""
        server = self.live.pop(kind, None)
        if server is not None:
            server.process.stop()

    def for_matrix(self) -> MatrixServers:
        """The plain and the eagle3 server, as the bug-class matrix takes them."""
        plain, spec = self.get("plain"), self.get("eagle3")
        startup = {"plain": round(plain.startup_s, 1), "spec": round(spec.startup_s, 1)}
        return MatrixServers(plain.url, spec.url, spec.log_path, self.class_file, startup)

    def close(self) -> None:
        for server in self.live.values():
            server.process.stop()
        self.live.clear()

    def report(self) -> str:
        return "; ".join(f"{s.name}: ready in {s.startup_s:.0f} s, RSS {s.rss_mib:.0f} MiB" for s in self.started)


@pytest.fixture(scope="session")
def vllm_servers(tmp_path_factory):
    require_vllm()
    servers = VLLMServers(tmp_path_factory.mktemp("vllm"))
    yield servers
    servers.close()
    if servers.started:
        print(f"\nvLLM servers: {servers.report()}")


@pytest.fixture
def vllm_matrix_servers(vllm_servers):
    """The session's plain and eagle3 servers lent to the bug-class matrix; eagle3 is retired after it."""
    try:
        yield vllm_servers.for_matrix()
    finally:
        vllm_servers.retire("eagle3")


__all__ = [
    "DRAFT_LEN",
    "SERVED_MODEL",
    "VLLMServer",
    "VLLMServers",
    "require_vllm",
    "serve_command",
    "vllm_matrix_servers",
    "vllm_servers",
]
