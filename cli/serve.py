"""`specdec-eval serve`: our engine behind an OpenAI-compatible HTTP server (serve/), in this process or, with
`--gpus N`, on rank 0 of a torchrun job whose replicas serve in lockstep (launch/serving.py)."""

from __future__ import annotations

import math
import os
import sys
from typing import Annotated, Any

import typer

from ..errors import UserError
from ..serve.defaults import (
    API_KEY_ENV,
    DEFAULT_GRACE_S,
    DEFAULT_HOST,
    DEFAULT_MAX_QUEUE,
    DEFAULT_MAX_REQUEST_SIZE,
    DEFAULT_PORT,
    LOG_LEVELS,
)
from ..serve.job_driver import JOB_DRIVER, serve_engine
from ..workers.config import parse_bytes
from ..workers.events import rank_events_path
from . import options as o

SERVER = "Server"
JOB = "Job (torchrun)"


@o.engine_options(exclude=("tp",))
def serve(
    host: Annotated[
        str, typer.Option("--host", help="Address to bind (0.0.0.0: every interface).", rich_help_panel=SERVER)
    ] = DEFAULT_HOST,
    port: Annotated[
        int, typer.Option("--port", help="Port (0: any free port).", rich_help_panel=SERVER)
    ] = DEFAULT_PORT,
    api_key: Annotated[
        str | None,
        typer.Option(
            "--api-key",
            envvar=API_KEY_ENV,
            show_envvar=True,
            rich_help_panel=SERVER,
            help="Require 'Authorization: Bearer KEY' on /v1/* (compared in constant time; printable ASCII).",
        ),
    ] = None,
    served_model_name: Annotated[
        str | None,
        typer.Option(
            "--served-model-name",
            help="The model id clients send (default: the --model value).",
            rich_help_panel=SERVER,
        ),
    ] = None,
    max_queue: Annotated[
        int,
        typer.Option(
            "--max-queue",
            help="Requests held at once, running and waiting; more get 503 with Retry-After (a request with more "
            "prompts than this: 400).",
            rich_help_panel=SERVER,
        ),
    ] = DEFAULT_MAX_QUEUE,
    max_request_bytes: Annotated[
        str,
        typer.Option(
            "--max-request-bytes", help="Largest request body (larger: 413), e.g. 1MiB.", rich_help_panel=SERVER
        ),
    ] = DEFAULT_MAX_REQUEST_SIZE,
    grace: Annotated[
        float,
        typer.Option(
            "--grace",
            help="Seconds in-flight requests may take to finish after SIGTERM / Ctrl-C before they are aborted.",
            rich_help_panel=SERVER,
        ),
    ] = DEFAULT_GRACE_S,
    log_level: Annotated[
        str,
        typer.Option(
            "--log-level", help="uvicorn's log level (debug also logs every request).", rich_help_panel=SERVER
        ),
    ] = "info",
    gpus: Annotated[
        int,
        typer.Option(
            "--gpus",
            help="Ranks: >1 serves from rank 0 of a torchrun job, every replica in "
            "lockstep (CPU ranks over gloo when there is no CUDA).",
            rich_help_panel=JOB,
        ),
    ] = 1,
    tp: Annotated[
        int | None,
        typer.Option(
            "--tp",
            help="Tensor-parallel size (default: the largest that divides --gpus and the "
            "model's heads; the other ranks are data-parallel replicas).",
            rich_help_panel=JOB,
        ),
    ] = None,
    rank_timeout: Annotated[
        float, typer.Option("--rank-timeout", help="Seconds a collective may wait for a rank.", rich_help_panel=JOB)
    ] = 600.0,
    engine_flags: o.EngineFlags | None = None,  # every engine option but --tp (cli/options.py)
) -> None:
    """Serve the engine over the OpenAI API: /v1/completions, /v1/chat/completions (streaming with server-sent
    events), /v1/models, /health, /metrics (vLLM's spec-decode counter names). Requests that arrive while others
    decode join the running batch at the next step. SIGTERM or Ctrl-C: the server drains (new requests get 503,
    in-flight ones finish within --grace seconds or are aborted), then stops listening and exits with status 0.

    Examples:
      specdec-eval serve --model smollm2 --spec eagle3
      specdec-eval serve --model tiny --device-memory 256MiB --port 0
      SPECDEC_EVAL_API_KEY=secret specdec-eval serve --host 0.0.0.0
      specdec-eval serve --gpus 2 --spec eagle3 --kv-cache v2
      curl -s localhost:8000/v1/completions -H 'Content-Type: application/json' \\
        -d '{"prompt": "Hi", "max_tokens": 16, "temperature": 0}'
    """
    if gpus < 1:
        raise UserError(f"--gpus must be at least 1, got {gpus}")
    if tp is not None and tp < 1:
        raise UserError(f"--tp must be at least 1, got {tp}")
    if max_queue < 1:
        raise UserError(f"--max-queue must be at least 1, got {max_queue}")
    if not (math.isfinite(grace) and grace >= 0):  # NaN compares false with everything, and acted as 0
        raise UserError(f"--grace must be a finite number of seconds >= 0, got {grace}")
    if not (math.isfinite(rank_timeout) and rank_timeout > 0):
        raise UserError(f"--rank-timeout must be a finite number of seconds > 0, got {rank_timeout}")
    if not 0 <= port <= 65535:
        raise UserError(f"--port must be in 0..65535, got {port}")
    if not host.strip():  # an unset $HOST: uvicorn and the socket module read "" as every interface (0.0.0.0)
        raise UserError(
            f"--host is empty; name the address to bind (default {DEFAULT_HOST}; 0.0.0.0 for every "
            "interface, if that is what you mean)"
        )
    if log_level.lower() not in LOG_LEVELS:
        raise UserError(f"--log-level must be one of {', '.join(LOG_LEVELS)}, got {log_level!r}")
    log_level = log_level.lower()
    body_limit = parse_bytes(max_request_bytes)
    if body_limit < 1:
        raise UserError(f"--max-request-bytes must be at least 1 byte, got {max_request_bytes!r}")
    from ..serve.limits import validate_api_key
    from ..serve.server import bind

    api_key = api_key_from(api_key)
    validate_api_key(api_key)
    bind(host, port).close()  # a port in use or an address not ours: said now, not after the model has loaded
    model = engine_flags["model"]
    config = engine_flags.config(events_path=rank_events_path(engine_flags["events_path"], gpus))
    server = {
        "host": host,
        "port": port,
        "model_name": served_model_name or model,
        "max_queue": max_queue,
        "max_request_bytes": body_limit,
        "grace_s": grace,
        "log_level": log_level,
    }
    if gpus > 1:
        _serve_job(config, server, api_key, gpus, tp, rank_timeout)
        return
    if tp not in (None, 1):
        raise UserError("--tp > 1 needs --gpus (one process per TP rank)")
    from ..workers.engine.engine import Engine

    engine = Engine.build(config)
    try:
        serve_engine(engine, engine, server, api_key)
    finally:
        engine.close()


def api_key_from(option: str | None) -> str | None:
    """The key to require: --api-key, else $SPECDEC_EVAL_API_KEY. click reads an empty variable as unset, so
    `SPECDEC_EVAL_API_KEY=` would have started a server without authentication: an empty key from either place is
    refused (serve/limits.py), never taken as "no key"."""
    if option is None and os.environ.get(API_KEY_ENV) == "":
        return ""
    return option


def _serve_job(
    config, server: dict[str, Any], api_key: str | None, gpus: int, tp: int | None, rank_timeout: float
) -> None:
    from dataclasses import replace

    from ..launch.job import Job, JobFailed, resolve_job_device
    from ..launch.layout import plan_layout
    from ..launch.serving import launch_serving
    from ..launch.torchrun import TorchrunSpec
    from ..workers.loading.checkpoint import load_checkpoint

    device = resolve_job_device(config.device, gpus)
    cfg = load_checkpoint(config.model).config
    layout = plan_layout(gpus, cfg.num_attention_heads, cfg.num_key_value_heads, tp)
    if api_key:
        os.environ[API_KEY_ENV] = api_key  # the ranks inherit this environment; the job file stays key-free
    job = Job(JOB_DRIVER, replace(config, tp_size=layout.tp, device=device), layout.tp, server, rank_timeout)
    try:
        launch_serving(job, TorchrunSpec(gpus), layout, device)
    except JobFailed as e:
        print(f"specdec-eval: error: serve failed: {e}", file=sys.stderr)
        raise typer.Exit(e.code) from None
