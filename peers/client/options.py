"""The options of `run --endpoint`: evaluate any OpenAI-compatible server (ours from `specdec-eval serve`,
trtllm-serve, vLLM, SGLang, llama.cpp), declared once: each field's default is its flag's, its metadata the flag
(`option_fields`). The engine flags (--spec, --draft-len, --kv-cache, --dtype) then declare what runs
behind the URL, which picks the reference entry; --model names where the local tokenizer comes from. `configs` builds
the server's EndpointConfig and its baseline server's."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...errors import UserError
from ...option_fields import flag
from ...workers.config import EngineConfig
from ..profiles import PROFILE_NAMES
from ..server.kv_usage import DRAIN_TIMEOUT_S
from ..server.log import AUTO, LOG_FORMAT_NAMES
from ..server.process import DEFAULT_STARTUP_TIMEOUT_S
from ..server.stall_watch import DEFAULT_STALL_FACTOR, DEFAULT_STALL_FLOOR_S
from .config import (
    DEFAULT_CONCURRENCY,
    DEFAULT_RETRIES,
    DEFAULT_TIMEOUT_S,
    REQUEST_SEED_MODES,
    EndpointConfig,
)

ENDPOINT = "Endpoint (any OpenAI-compatible server)"
SERVER = "Endpoint: the server's process, log and health"


@dataclass(frozen=True)
class EndpointOptions:
    endpoint: str | None = field(
        default=None,
        metadata=flag(
            "--endpoint",
            group=ENDPOINT,
            help="Base URL of an OpenAI-compatible server, e.g. http://127.0.0.1:8000 (its /v1/completions is used; "
            "--chat for /v1/chat/completions).",
        ),
    )
    chat: bool = field(
        default=False,
        metadata=flag(
            "--chat", group=ENDPOINT, help="Use the chat completions API (the server applies its chat template)."
        ),
    )
    tokenizer: str | None = field(
        default=None,
        metadata=flag(
            "--tokenizer",
            group=ENDPOINT,
            help="Local tokenizer (a Hugging Face folder or cached name) for counting tokens and token ids; "
            "default: the "
            "one of --model.",
        ),
    )
    served_model: str | None = field(
        default=None,
        metadata=flag(
            "--served-model", group=ENDPOINT, help="Model id to request (default: the one /v1/models lists)."
        ),
    )
    api_key: str | None = field(
        default=None,
        metadata=flag("--api-key", group=ENDPOINT, help="Bearer key (default: $OPENAI_API_KEY); never recorded."),
    )
    concurrency: int = field(
        default=DEFAULT_CONCURRENCY,
        metadata=flag("--concurrency", min=1, group=ENDPOINT, help="Requests in flight at once."),
    )
    request_timeout: float = field(
        default=DEFAULT_TIMEOUT_S,
        metadata=flag(
            "--request-timeout",
            min=1.0,
            group=ENDPOINT,
            help="Seconds one request may take (long reasoning outputs need many minutes).",
        ),
    )
    request_retries: int = field(
        default=DEFAULT_RETRIES,
        metadata=flag(
            "--request-retries",
            min=0,
            group=ENDPOINT,
            help="Retries of a request that failed transiently (connection, timeout, 5xx, 429); then it is a recorded "
            "failure, never an empty answer.",
        ),
    )
    request_seeds: str = field(
        default="per-sample",
        metadata=flag(
            "--request-seeds",
            group=ENDPOINT,
            choices=lambda: REQUEST_SEED_MODES,
            help="Sampled requests carry their sample's seed (per-sample: reproducible draws) or none (as most "
            "production traffic; for a server that fails on seeded sampling, e.g. vLLM's CPU build): "
            "{choices}.",
        ),
    )
    baseline_endpoint: str | None = field(
        default=None,
        metadata=flag(
            "--baseline-endpoint",
            group=ENDPOINT,
            help="The same engine without speculation: evaluated first, it is the lossless gate's baseline.",
        ),
    )
    serve_cmd: str | None = field(
        default=None,
        metadata=flag(
            "--serve-cmd",
            group=SERVER,
            help="Start the server under test with this command (shell-like words, leading NAME=VALUE words its "
            "environment), wait until --endpoint answers, stop it at the end; its output becomes its log. "
            "Recorded with secrets scrubbed.",
        ),
    )
    server_log: str | None = field(
        default=None,
        metadata=flag(
            "--server-log",
            group=SERVER,
            help="The server's log file (a regular file that exists), read from its start while the run goes: its "
            "known lines become the run's events (with --serve-cmd: where its output goes; default a temporary "
            "file removed at the end). The run prints how many lines it read.",
        ),
    )
    server_log_format: str = field(
        default=AUTO,
        metadata=flag(
            "--server-log-format",
            group=SERVER,
            choices=lambda: LOG_FORMAT_NAMES,
            help="The signature table that reads the log: {choices} (auto: from the server's identity, else from the "
            "log's lines).",
        ),
    )
    engine_profile: str = field(
        default=AUTO,
        metadata=flag(
            "--engine-profile",
            group=SERVER,
            choices=lambda: PROFILE_NAMES,
            help="Which engine serves the endpoint: {choices} (its log table, the extensions and sampling defaults "
            "its requests carry; auto: what the server says it is, its model card's owned_by or Server header).",
        ),
    )
    baseline_serve_cmd: str | None = field(
        default=None,
        metadata=flag(
            "--baseline-serve-cmd",
            group=SERVER,
            help="Start the baseline server the same way (it must answer at --baseline-endpoint); its noise-floor "
            "control is then recorded under this command and reused.",
        ),
    )
    baseline_server_log: str | None = field(
        default=None,
        metadata=flag("--baseline-server-log", group=SERVER, help="The baseline server's log file (as --server-log)."),
    )
    startup_timeout: float = field(
        default=DEFAULT_STARTUP_TIMEOUT_S,
        metadata=flag(
            "--startup-timeout",
            min=1.0,
            group=SERVER,
            help="Seconds a server started by --serve-cmd may take to answer; if it exits or never answers, the run "
            "stops with the log's last lines.",
        ),
    )
    stall_factor: float = field(
        default=DEFAULT_STALL_FACTOR,
        metadata=flag(
            "--stall-factor",
            min=1.0,
            group=SERVER,
            help="A server that answers nothing for this many times its slowest answer (at least "
            "--stall-floor seconds) has stopped answering: the run ends, its unanswered documents fail.",
        ),
    )
    stall_floor: float = field(
        default=DEFAULT_STALL_FLOOR_S,
        metadata=flag("--stall-floor", min=0.1, group=SERVER, help="The shortest stall window, in seconds."),
    )
    kv_drain_timeout: float = field(
        default=DRAIN_TIMEOUT_S,
        metadata=flag(
            "--kv-drain-timeout",
            min=0.0,
            group=SERVER,
            help="Seconds the server's KV usage may take to return to idle after the run (0: not checked); else a "
            "failing kv_leak event.",
        ),
    )

    def configs(self, engine: EngineConfig, declares_kv_cache: bool) -> tuple[EndpointConfig, EndpointConfig | None]:
        """The server under test and its baseline server (None: no --baseline-endpoint). The engine flags declare
        what serves the URL: --spec eagle3 --draft-len K (it speculates), --dtype, --seed, --kv-cache (only when
        given: a server does not say which it runs); --model is where the local tokenizer comes from."""
        if self.endpoint is None:
            raise ValueError("no --endpoint")
        if (self.baseline_serve_cmd or self.baseline_server_log) and not self.baseline_endpoint:
            raise UserError(
                "--baseline-serve-cmd and --baseline-server-log need --baseline-endpoint (where that server answers)"
            )
        declared = dict(
            model=engine.model,
            tokenizer=self.tokenizer,
            chat=self.chat,
            served_model=self.served_model,
            api_key=self.api_key,
            concurrency=self.concurrency,
            timeout_s=self.request_timeout,
            max_retries=self.request_retries,
            seed=engine.seed,
            dtype=engine.dtype,
            kv_cache=engine.kv_cache.version if declares_kv_cache else None,
            server_log_format=self.server_log_format,
            engine_profile=self.engine_profile,
            startup_timeout_s=self.startup_timeout,
            stall_factor=self.stall_factor,
            stall_floor_s=self.stall_floor,
            kv_drain_timeout_s=self.kv_drain_timeout,
            request_seeds=self.request_seeds,
        )
        spec = engine.spec
        target = EndpointConfig(
            url=self.endpoint,
            spec=spec.algorithm if spec else None,
            max_draft_len=spec.max_draft_len if spec else 0,
            serve_cmd=self.serve_cmd,
            server_log=self.server_log,
            **declared,
        )
        baseline = None
        if self.baseline_endpoint:
            baseline = EndpointConfig(
                url=self.baseline_endpoint,
                serve_cmd=self.baseline_serve_cmd,
                server_log=self.baseline_server_log,
                **declared,
            )
        return target, baseline

    @property
    def server_flags_given(self) -> list[str]:
        """The flags about a server's process and log that were given (they need --endpoint)."""
        given = {
            "--serve-cmd": self.serve_cmd,
            "--server-log": self.server_log,
            "--baseline-serve-cmd": self.baseline_serve_cmd,
            "--baseline-server-log": self.baseline_server_log,
        }
        return [name for name, value in given.items() if value is not None]
