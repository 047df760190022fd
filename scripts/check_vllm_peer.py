"""One real completion from vLLM's CPU build on the exported SmolLM2: the check `scripts/setup_vllm.sh` ends with, so
that a vLLM that installs but cannot serve stops the setup in one line instead of failing the vLLM tests one by one.

Usage: check_vllm_peer.py VLLM_PYTHON MODEL_DIR. Starts a plain server (as the tests do), asks for 8 greedy tokens,
stops it. Exit 0 with the completion and the start-up seconds on stdout; otherwise the last line says why."""

from __future__ import annotations

import socket
import sys
import tempfile
from pathlib import Path

import httpx
from specdec_eval.peers.profiles.vllm import SERVED_MODEL, VLLMServeCommand
from specdec_eval.peers.server.process import ServerProcess

PROMPT = "The capital of France is"
STARTUP_TIMEOUT_S = 420.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(python: str, model_dir: str) -> None:
    cmd = VLLMServeCommand(python=python, model_dir=model_dir, port=free_port())
    log = Path(tempfile.mkdtemp(prefix="check-vllm-")) / "vllm.log"
    try:
        with ServerProcess(str(cmd), log) as server:
            startup_s = server.wait_ready(cmd.url, timeout_s=STARTUP_TIMEOUT_S)
            r = httpx.post(
                cmd.url + "/v1/completions",
                timeout=120,
                json={"model": SERVED_MODEL, "prompt": PROMPT, "max_tokens": 8, "temperature": 0.0},
            )
    except Exception as exc:  # the last line is what the setup prints
        lines = str(exc).strip().splitlines()
        raise SystemExit(f"vLLM did not serve (log {log}): {lines[-1] if lines else type(exc).__name__}") from None
    if r.status_code != 200:
        raise SystemExit(f"vLLM answered HTTP {r.status_code}: {r.text[:200]}")
    text = r.json()["choices"][0]["text"]
    if not text.strip():
        raise SystemExit(f"vLLM answered {PROMPT!r} with an empty completion")
    print(f"{text!r} (server ready in {startup_s:.0f} s)")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: check_vllm_peer.py VLLM_PYTHON MODEL_DIR")
    main(sys.argv[1], sys.argv[2])
