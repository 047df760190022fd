"""`serve` on a torchrun job's rank 0 (the rank entry calls `job_driver`), and the one way either path starts
the HTTP server over an engine (`serve_engine`): the local `specdec-eval serve` and rank 0 of `serve --gpus N`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .defaults import API_KEY_ENV  # how a torchrun job's rank 0 gets the key (never written to the job file)

JOB_DRIVER = "specdec_eval.serve.job_driver:job_driver"


def serve_engine(engine: Any, local: Any, server: dict[str, Any], api_key: str | None) -> None:
    """Serve `engine` (a ServingEngine) until SIGTERM; `local` is the Engine whose limits it has (rank 0's, under
    torchrun). `server`: host, port, model_name, max_queue, max_request_bytes, grace_s, log_level."""
    from .app import ServerSettings
    from .server import serve_forever

    settings = ServerSettings(
        model_name=server["model_name"],
        max_model_len=local.max_seq_len,
        vocab_size=local.model_config.vocab_size,
        api_key=api_key or None,
        max_queue=server["max_queue"],
        max_request_bytes=server["max_request_bytes"],
    )
    serve_forever(engine, settings, server["host"], server["port"], server["grace_s"], server["log_level"])


def job_driver(engine, payload: dict[str, Any]) -> dict[str, Any]:
    """Rank 0 of a serving job: the server over the sharded engine, until SIGTERM."""
    Path(payload["pid_file"]).write_text(str(os.getpid()), encoding="utf-8")  # where the launcher sends SIGTERM
    serve_engine(engine, engine.local_engine, payload, os.environ.get(API_KEY_ENV))
    return {"stopped": "cleanly"}
