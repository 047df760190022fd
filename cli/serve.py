"""`specdec-eval serve`: our engine behind an OpenAI-compatible HTTP server, in this process or, with `--gpus N`, on
rank 0 of a torchrun job whose replicas serve in lockstep. Its options are declared on `ServeOptions`."""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass
from typing import Any

import typer

from ..errors import UserError
from ..option_fields import option
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


@dataclass(frozen=True)
class ServeOptions:
    """`serve`'s own options (the engine's come from the engine option list), checked in the command."""

    host: str = option(DEFAULT_HOST, "--host", help="Address to bind (0.0.0.0: every interface).", group=SERVER)
    port: int = option(DEFAULT_PORT, "--port", help="Port (0: any free port).", group=SERVER)
    api_key: str | None = option(
        None,
        "--api-key",
        envvar=API_KEY_ENV,
        group=SERVER,
        help="Require 'Authorization: Bearer KEY' on /v1/* (compared in constant time; printable ASCII).",
    )
    served_model_name: str | None = option(
        None, "--served-model-name", help="The model id clients send (default: the --model value).", group=SERVER
    )
    max_queue: int = option(
        DEFAULT_MAX_QUEUE,
        "--max-queue",
        help="Requests held at once, running and waiting; more get 503 with Retry-After (a request with more "
        "prompts than this: 400).",
        group=SERVER,
    )
    max_request_bytes: str = option(
        DEFAULT_MAX_REQUEST_SIZE,
        "--max-request-bytes",
        help="Largest request body (larger: 413), e.g. 1MiB.",
        group=SERVER,
    )
    grace: float = option(
        DEFAULT_GRACE_S,
        "--grace",
        help="Seconds in-flight requests may take to finish after SIGTERM / Ctrl-C before they are aborted.",
        group=SERVER,
    )
    log_level: str = option(
        "info", "--log-level", help="uvicorn's log level (debug also logs every request).", group=SERVER
    )
    gpus: int = option(
        1,
        "--gpus",
        help="Ranks: >1 serves from rank 0 of a torchrun job, every replica in "
        "lockstep (CPU ranks over gloo when there is no CUDA).",
        group=JOB,
    )
    tp: int | None = option(
        None,
        "--tp",
        help="Tensor-parallel size (default: the largest that divides --gpus and the "
        "model's heads; the other ranks are data-parallel replicas).",
        group=JOB,
    )
    rank_timeout: float = option(600.0, "--rank-timeout", help="Seconds a collective may wait for a rank.", group=JOB)


@o.engine_options(exclude=("tp",))
@o.dataclass_options(opts=ServeOptions)
def serve(*, opts: ServeOptions, engine_flags: o.EngineFlags) -> None:
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
    if opts.gpus < 1:
        raise UserError(f"--gpus must be at least 1, got {opts.gpus}")
    if opts.tp is not None and opts.tp < 1:
        raise UserError(f"--tp must be at least 1, got {opts.tp}")
    if opts.max_queue < 1:
        raise UserError(f"--max-queue must be at least 1, got {opts.max_queue}")
    if not (math.isfinite(opts.grace) and opts.grace >= 0):  # NaN compares false with everything, and acted as 0
        raise UserError(f"--grace must be a finite number of seconds >= 0, got {opts.grace}")
    if not (math.isfinite(opts.rank_timeout) and opts.rank_timeout > 0):
        raise UserError(f"--rank-timeout must be a finite number of seconds > 0, got {opts.rank_timeout}")
    if not 0 <= opts.port <= 65535:
        raise UserError(f"--port must be in 0..65535, got {opts.port}")
    if not opts.host.strip():  # an unset $HOST: uvicorn and the socket module read "" as every interface (0.0.0.0)
        raise UserError(
            f"--host is empty; name the address to bind (default {DEFAULT_HOST}; 0.0.0.0 for every "
            "interface, if that is what you mean)"
        )
    log_level = opts.log_level.lower()
    if log_level not in LOG_LEVELS:
        raise UserError(f"--log-level must be one of {', '.join(LOG_LEVELS)}, got {opts.log_level!r}")
    body_limit = parse_bytes(opts.max_request_bytes)
    if body_limit < 1:
        raise UserError(f"--max-request-bytes must be at least 1 byte, got {opts.max_request_bytes!r}")
    from ..serve.limits import validate_api_key
    from ..serve.server import bind

    api_key = api_key_from(opts.api_key)
    validate_api_key(api_key)
    bind(opts.host, opts.port).close()  # a port in use or an address not ours: said now, not after the model loaded
    model = engine_flags["model"]
    config = engine_flags.config(events_path=rank_events_path(engine_flags["events_path"], opts.gpus))
    server = {
        "host": opts.host,
        "port": opts.port,
        "model_name": opts.served_model_name or model,
        "max_queue": opts.max_queue,
        "max_request_bytes": body_limit,
        "grace_s": opts.grace,
        "log_level": log_level,
    }
    if opts.gpus > 1:
        _serve_job(config, server, api_key, opts.gpus, opts.tp, opts.rank_timeout)
        return
    if opts.tp not in (None, 1):
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
    refused by the server's key check, never taken as "no key"."""
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
