"""vLLM's CPU build as a side of `bench`, when its venv is here (`make setup-vllm`: .venv-vllm beside the project, or
$VLLM_VENV, with the exported SmolLM2 in it): one plain server, float32, started before the rounds and stopped after
them, fed the same prompt token ids `batch` requests at a time (its concurrency), greedy, EOS ignored. Prefix caching
follows our side's block reuse, so both sides do the same work.

The server's decode phase cannot be seen from outside, so this side has an end-to-end rate only."""

from __future__ import annotations

import contextlib
import os
import socket
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from .speed import Chunk, Side

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 600.0  # 35-100 s alone; more on a loaded machine


def vllm_venv() -> Path:
    return Path(os.environ.get("VLLM_VENV", REPO / ".venv-vllm"))


def vllm_model_dir() -> Path:
    return Path(os.environ.get("VLLM_MODEL_DIR", vllm_venv() / "smollm2-hf"))


def vllm_missing(model: str) -> str | None:
    """Why this bench cannot have a vLLM side, or None."""
    if model != "smollm2":
        return f"the vLLM side serves the exported SmolLM2 only (not {model})"
    if not (vllm_venv() / ".vllm-installed").is_file():
        return f"vLLM is not set up in {vllm_venv()} (make setup-vllm)"
    if not (vllm_model_dir() / "config.json").is_file():
        return f"no exported SmolLM2 in {vllm_model_dir()} (make setup-vllm)"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def vllm_side(prefix_caching: bool, log_dir: str | None = None) -> Iterator[Side]:
    """A started plain vLLM server as a Side; stopped when the block ends."""
    from ...peers.profiles.vllm import SERVED_MODEL, VLLMServeCommand
    from ...peers.server.process import ServerProcess

    extra = () if prefix_caching else ("--no-enable-prefix-caching",)
    command = VLLMServeCommand(
        python=str(vllm_venv() / "bin" / "python"), model_dir=str(vllm_model_dir()), port=_free_port(), extra=extra
    )
    log = Path(log_dir or tempfile.mkdtemp(prefix="specdec-bench-vllm-")) / "vllm.log"
    with ServerProcess(str(command), log) as server:
        server.wait_ready(command.url, timeout_s=START_TIMEOUT_S)
        with httpx.Client(timeout=600.0) as client:

            def one(prompt: list[int], n: int) -> list[int]:
                body = {
                    "model": SERVED_MODEL,
                    "prompt": prompt,
                    "max_tokens": n,
                    "temperature": 0.0,
                    "ignore_eos": True,
                    "return_token_ids": True,
                }
                r = client.post(f"{command.url}/v1/completions", json=body)
                r.raise_for_status()
                return list(r.json()["choices"][0].get("token_ids") or [])

            def run(prompts: list[list[int]], n: int) -> Chunk:
                with ThreadPoolExecutor(max_workers=len(prompts)) as pool:
                    outputs = list(pool.map(lambda p: one(p, n), prompts))
                return Chunk(outputs, 0, 0.0)

            yield run
