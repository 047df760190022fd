"""llama.cpp's OpenAI-compatible server (the llama-cpp-python package, `server` extra) as a real third-party peer for
the endpoint tests: started on a free port over the embedded SmolLM2 GGUF, waited for, and stopped. With
`draft_len` it speculates: prompt-lookup decoding (`--draft_model prompt-lookup-decoding`), K tokens proposed from
the request's own text and verified in one batch, what `--spec ngram --draft-len K` declares. `llama_pair` is the
session's pair of servers, speculative and plain, on the same GGUF (started once: a few seconds each).

scripts/setup.sh installs it (the `peer` extra). Tests that need it call `require_llama_cpp()`: it skips with the
reason when the package is missing, and fails instead under CI=true, where the peer must be there."""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from specdec_eval.peers.profiles.llamacpp import SERVED_MODEL, LlamaCppServeCommand  # noqa: F401 (the tests import it here)

# The server's launch command is the profile's (`LlamaCppServeCommand`: one thread, one seed, logits of every
# position only where asked). A short context keeps the "prompt beyond the context" test cheap.
N_CTX = 512
START_TIMEOUT_S = 120.0
SERVER_PACKAGES = ("llama_cpp", "uvicorn", "fastapi", "sse_starlette", "starlette_context", "pydantic_settings")


def llama_cpp_missing() -> list[str]:
    return [name for name in SERVER_PACKAGES if importlib.util.find_spec(name) is None]


def require_llama_cpp() -> None:
    missing = llama_cpp_missing()
    if not missing:
        return
    reason = (
        f"llama.cpp's server is not installed (missing: {', '.join(missing)}); "
        "scripts/setup.sh installs it: pip install -e '.[peer]'"
    )
    if os.environ.get("CI", "").lower() in ("true", "1", "yes"):
        pytest.fail(reason + " (CI must run the llama.cpp peer tests)")
    pytest.skip(reason)


def smollm2_gguf() -> Path:
    from specdec_eval.workers.loading.checkpoint import smollm2_path

    return smollm2_path()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LlamaServer:
    """`with LlamaServer(log_dir) as server:` runs the server until the block ends; `server.url` is its root."""

    def __init__(
        self,
        log_dir: Path,
        api_key: str | None = None,
        model: Path | None = None,
        draft_len: int | None = None,
        logits_all: bool = False,
    ) -> None:
        self.log_path = Path(log_dir) / "llama-server.log"
        self.logits_all = logits_all
        self.api_key = api_key
        self.draft_len = draft_len
        self.model = model or smollm2_gguf()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None

    def command(self) -> list[str]:
        return LlamaCppServeCommand(
            sys.executable,
            str(self.model),
            self.port,
            n_ctx=N_CTX,
            logits_all=self.logits_all,
            draft_len=self.draft_len,
            api_key=self.api_key,
        ).argv

    def start(self) -> LlamaServer:
        log = self.log_path.open("wb")
        self.process = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"llama.cpp server exited with {self.process.returncode}:\n{self.log_tail()}")
            try:
                if httpx.get(self.url + "/v1/models", headers=headers, timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        self.stop()
        raise RuntimeError(f"llama.cpp server not ready after {START_TIMEOUT_S:.0f} s:\n{self.log_tail()}")

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=15)

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.exists() else ""

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


PEER_DRAFT_LEN = 3


@pytest.fixture(scope="session")
def llama_pair(tmp_path_factory):
    """(speculative, plain) llama.cpp servers on the same GGUF, started once per session."""
    require_llama_cpp()
    logs = tmp_path_factory.mktemp("llama-pair")
    (logs / "spec").mkdir()
    (logs / "plain").mkdir()
    # the lossless gate asks both for logprobs: the plain one needs the logits of every position to answer
    with (
        LlamaServer(logs / "spec", draft_len=PEER_DRAFT_LEN) as spec,
        LlamaServer(logs / "plain", logits_all=True) as plain,
    ):
        yield spec, plain
