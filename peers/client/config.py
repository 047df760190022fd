"""What an endpoint run is told: the server's URL (with the credentials kept out of what is recorded), the local
tokenizer, and what the user declares about the engine behind the URL (spec-dec, KV cache, dtype), which selects
the reference entry because a server does not say."""

from __future__ import annotations

import ipaddress
import math
import os
import re
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ...errors import UserError
from ...user_files import describe
from ...workers.config import DTYPES
from ...workers.kv_cache import KV_CACHE_MANAGERS
from ...workers.loading.chat_template import ChatTemplateKwargs
from ...workers.spec import SPEC_ALGORITHMS
from ..profiles import check_profile
from ..server.kv_usage import DRAIN_TIMEOUT_S
from ..server.log import AUTO, check_log_format
from ..server.process import DEFAULT_STARTUP_TIMEOUT_S, DEFAULT_STOP_GRACE_S, ServerCommand
from ..server.stall_watch import DEFAULT_STALL_FACTOR, DEFAULT_STALL_FLOOR_S, StallPolicy

# Long generations (GPQA's 32k-token answers on real models) take many minutes per request on a busy server.
DEFAULT_TIMEOUT_S = 3600.0
DEFAULT_RETRIES = 3
DEFAULT_CONCURRENCY = 8
MAX_TIMEOUT_S = 7 * 24 * 3600.0  # a week: longer than any request; beyond it a timeout is a typo (or inf)

REQUEST_SEED_MODES = ("per-sample", "none")


@dataclass(frozen=True)
class EndpointConfig:
    """An OpenAI-compatible server and how to drive it. `url` may be the server root or any of its /v1 paths.

    api_key: sent as `Authorization: Bearer`; None falls back to $OPENAI_API_KEY (lm-eval's convention).
    served_model: the model id sent in requests; None asks /v1/models (which must then serve exactly one).
    tokenizer / model: where the local tokenizer comes from (see `load_local_tokenizer`).
    max_retries: retries after the first attempt of a request that failed transiently (connection, timeout, 5xx,
    408, 429); a 4xx answer is not retried. spec / max_draft_len / kv_cache / dtype / tp_size: declared, recorded.

    The server beyond its answers (`server.watch`):
    serve_cmd: start the server with this command (its stdout and stderr become its log), wait until `url` answers
    (at most startup_timeout_s), stop it at the end (SIGTERM, SIGKILL after stop_grace_s). The command is recorded
    with its secrets scrubbed.
    server_log: the server's log file, followed from its start (with serve_cmd: where its output goes, else a
    temporary file removed at the end; without serve_cmd it must exist: a regular file); its known lines become
    events (`server.log`). server_log_format: the signature table that reads it ("auto": from the
    server's identity, else from the log's content). engine_profile: which engine serves it (`profiles`: its
    log table, request extensions and defaults); "auto": the one the server's identity names.
    stall_factor / stall_floor_s: a server that stops answering ends the run (`server.stall_watch`).
    kv_drain_timeout_s: how long the server's KV usage may take to return to idle after a run (0: not checked).
    request_seeds: "per-sample" (each sampled request carries its sample's seed: reproducible draws) or "none"
    (no seed, as production traffic mostly is; some servers cannot sample with one).
    chat_template_kwargs: the chat template's extra variables: sent as `chat_template_kwargs` in chat requests (the
    server renders the template), used by the local template for chat prompts sent to /v1/completions.
    """

    url: str
    chat: bool = False
    served_model: str | None = None
    tokenizer: str | None = None
    model: str | None = None
    api_key: str | None = None
    concurrency: int = DEFAULT_CONCURRENCY
    max_retries: int = DEFAULT_RETRIES
    timeout_s: float = DEFAULT_TIMEOUT_S
    seed: int = 0
    spec: str | None = None
    max_draft_len: int = 0
    kv_cache: str | None = None
    dtype: str = "auto"
    tp_size: int = 1
    verify_tls: bool = True
    serve_cmd: str | None = None
    server_log: str | None = None
    server_log_format: str = AUTO
    engine_profile: str = AUTO
    startup_timeout_s: float = DEFAULT_STARTUP_TIMEOUT_S
    stop_grace_s: float = DEFAULT_STOP_GRACE_S
    stall_factor: float = DEFAULT_STALL_FACTOR
    stall_floor_s: float = DEFAULT_STALL_FLOOR_S
    kv_drain_timeout_s: float = DRAIN_TIMEOUT_S
    request_seeds: str = "per-sample"
    chat_template_kwargs: ChatTemplateKwargs = ChatTemplateKwargs()

    def __post_init__(self) -> None:
        if EndpointURL.parse(self.url).has_credentials and self.api_key:
            # Credentials in the URL become a basic-auth header, which would replace the bearer key.
            raise UserError("give the endpoint either credentials in its URL or an API key, not both")
        if self.concurrency < 1:
            raise UserError(f"endpoint concurrency must be positive, got {self.concurrency}")
        if self.max_retries < 0:
            raise UserError(f"endpoint retries must be >= 0, got {self.max_retries}")
        if not (math.isfinite(self.timeout_s) and 0 < self.timeout_s <= MAX_TIMEOUT_S):  # inf: int(inf) raised later
            raise UserError(
                f"endpoint request timeout must be a number of seconds in (0, {MAX_TIMEOUT_S:g}], got {self.timeout_s}"
            )
        if self.spec is not None and self.spec not in SPEC_ALGORITHMS:
            raise UserError(f"unknown spec-dec algorithm {self.spec!r} (known: {', '.join(SPEC_ALGORITHMS)})")
        if self.spec is None and self.max_draft_len:
            raise UserError("a max draft len was declared without --spec")
        if self.spec is not None and not 1 <= self.max_draft_len <= 16:
            raise UserError(f"declare the server's max draft len (1..16) with --spec, got {self.max_draft_len}")
        if self.kv_cache is not None and self.kv_cache not in KV_CACHE_MANAGERS:
            raise UserError(f"unknown kv-cache version {self.kv_cache!r} (known: {', '.join(KV_CACHE_MANAGERS)})")
        if self.dtype not in DTYPES:
            raise UserError(f"unknown dtype {self.dtype!r} (known: {', '.join(DTYPES)})")
        if self.tp_size < 1:
            raise UserError(f"TP size must be positive, got {self.tp_size}")
        if self.serve_cmd is not None:
            ServerCommand.parse(self.serve_cmd)  # a command that cannot be read: said now
        if self.server_log is not None:
            check_server_log(self.server_log, started_here=self.serve_cmd is not None)
        check_log_format(self.server_log_format)
        check_profile(self.engine_profile)
        if not self.startup_timeout_s > 0:
            raise UserError(f"the server startup timeout must be positive, got {self.startup_timeout_s}")
        if self.stop_grace_s < 0:
            raise UserError(f"the server stop grace period must be >= 0, got {self.stop_grace_s}")
        if self.request_seeds not in REQUEST_SEED_MODES:
            raise UserError(f"unknown request seeds {self.request_seeds!r} (known: {', '.join(REQUEST_SEED_MODES)})")
        if self.kv_drain_timeout_s < 0:
            raise UserError(f"the KV drain timeout must be >= 0, got {self.kv_drain_timeout_s}")
        self.stall_policy  # noqa: B018 - validates the factor and the floor

    @property
    def stall_policy(self) -> StallPolicy:
        return StallPolicy(factor=self.stall_factor, floor_s=self.stall_floor_s)

    def __repr__(self) -> str:  # tracebacks and logs show the config: never its credentials
        shown = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("url", "api_key")}
        if self.serve_cmd is not None:  # a command may carry keys too
            shown["serve_cmd"] = ServerCommand.parse(self.serve_cmd).recorded
        body = ", ".join(f"{k}={v!r}" for k, v in shown.items())
        key = "'***'" if self.api_key else "None"
        return f"EndpointConfig(url={EndpointURL.parse(self.url).public!r}, api_key={key}, {body})"

    def resolved_api_key(self) -> str | None:
        return self.api_key or os.environ.get("OPENAI_API_KEY") or None

    def headers(self) -> dict[str, str]:
        key = self.resolved_api_key()
        # Never an empty dict: lm-eval replaces an empty header with "Bearer $OPENAI_API_KEY".
        return {"Authorization": f"Bearer {key}"} if key else {"Accept": "application/json"}


def check_server_log(path: str, started_here: bool) -> None:
    """A server log is read as any file a user names: a regular file. A missing one is allowed only when the run
    starts the server itself (its output then creates it); a folder, a device (/dev/zero reads without end) or a
    FIFO (blocks) is refused in one line."""
    try:
        kind = describe(path)
    except FileNotFoundError:
        if started_here and Path(path).parent.is_dir():
            return
        why = "its folder does not exist" if started_here else "a log to follow must exist; --serve-cmd creates one"
        raise UserError(f"server log {path}: not found ({why})") from None
    except OSError as exc:
        raise UserError(f"server log {path}: cannot be read ({exc.strerror or exc})") from None
    if kind is not None:
        raise UserError(f"server log {path}: is {kind}, not a regular file")
    if not os.access(path, os.W_OK if started_here else os.R_OK):
        raise UserError(f"server log {path}: cannot be {'written' if started_here else 'read'} (permission denied)")


@dataclass(frozen=True)
class EndpointURL:
    """`root`: where requests go (credentials in the URL kept: requests and httpx send them as basic auth);
    `public`: the same without user, password, query or fragment: what manifests and messages show."""

    root: str
    public: str
    secrets: tuple[str, ...] = ()  # the password, to scrub from error messages
    has_credentials: bool = False

    # The server root is the URL with any of these endings removed.
    SUFFIXES = ("/v1/chat/completions", "/v1/completions", "/chat/completions", "/completions", "/v1")

    @classmethod
    def parse(cls, url: str) -> EndpointURL:
        try:
            parts = urlsplit(url.strip())
            hostname = parts.hostname
        except ValueError as e:  # "Invalid IPv6 URL": an unclosed [ ... ]
            raise UserError(f"endpoint URL cannot be read ({e}): {_redact_url(url)!r}") from None
        if parts.scheme not in ("http", "https") or not hostname:
            raise UserError(f"endpoint URL must look like http://HOST:PORT[/v1], got {_redact_url(url)!r}")
        if parts.query or parts.fragment:
            raise UserError("endpoint URL must not carry a query or fragment; pass an API key with --api-key")
        try:
            port = parts.port
        except ValueError:
            raise UserError(f"endpoint URL has a bad port: {_redact_url(url)!r}") from None
        path = parts.path.rstrip("/")
        for suffix in cls.SUFFIXES:
            if path.endswith(suffix):
                path = path[: -len(suffix)]
                break
        host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
        netloc = host + (f":{port}" if port is not None else "")
        public = urlunsplit((parts.scheme, netloc, path, "", ""))
        root = urlunsplit((parts.scheme, parts.netloc, path, "", ""))
        secrets = tuple(s for s in (parts.password,) if s)
        return cls(root=root, public=public, secrets=secrets, has_credentials=bool(parts.username or parts.password))

    def same_server(self, other: EndpointURL) -> bool:
        """Whether two URLs reach the same server (then one cannot be the other's lossless baseline: a server judged
        against itself agrees with itself). Compared: scheme, host (case-insensitive; every loopback name is one
        host: localhost, 127.0.0.0/8, ::1, 0.0.0.0 as a client reaches it), port (the scheme's default when none)
        and path. Two names of one machine that are not loopback cannot be told apart from here."""
        return _server_key(self.public) == _server_key(other.public)

    @property
    def completions(self) -> str:
        return self.root + "/v1/completions"

    @property
    def chat_completions(self) -> str:
        return self.root + "/v1/chat/completions"


_DEFAULT_PORTS = {"http": 80, "https": 443}
_LOOPBACK = "loopback"


def _server_key(public: str) -> tuple[str, str, int | None, str]:
    parts = urlsplit(public)
    host = (parts.hostname or "").lower()
    if host == "localhost":
        host = _LOOPBACK
    else:
        try:
            address = ipaddress.ip_address(host)
        except ValueError:  # a name, not an address
            address = None
        if address is not None and (address.is_loopback or address.is_unspecified):  # 0.0.0.0 / :: reach this host
            host = _LOOPBACK
    return parts.scheme, host, parts.port or _DEFAULT_PORTS.get(parts.scheme), parts.path.rstrip("/")


def _redact_url(url: str) -> str:
    try:
        password = urlsplit(url).password
    except ValueError:  # unreadable: whatever stands before an '@' may be credentials
        return re.sub(r"//[^/]*@", "//***@", url)
    return url.replace(password, "***") if password else url


def load_local_tokenizer(tokenizer: str | None, model: str | None) -> tuple[Any, str]:
    """(tokenizer, where it came from). `tokenizer`: a Hugging Face folder, a tokenizer name already in the local
    cache (nothing is downloaded), or anything `--model` takes (a preset, a .gguf file or a folder holding one).
    Without it, the tokenizer of `model` (its GGUF or HF folder). Raises UserError when neither gives one."""
    from ...workers.loading.checkpoint import load_checkpoint

    if tokenizer is None and model is None:
        raise UserError("an endpoint run needs a local tokenizer: pass --tokenizer (HF folder or name) or --model")
    if tokenizer is None or _is_checkpoint(tokenizer):
        checkpoint = load_checkpoint(tokenizer or model)
        return checkpoint.load_tokenizer(), checkpoint.source
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(tokenizer, local_files_only=True), f"hf-tokenizer:{tokenizer}"
    except (OSError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UserError(f"cannot load tokenizer {tokenizer!r} offline ({first}); pass a local folder") from None


def _is_checkpoint(value: str) -> bool:
    """A preset, a .gguf file, or a folder with a .gguf and no tokenizer files of its own."""
    if value in ("smollm2", "tiny"):
        return True
    path = Path(value).expanduser()
    if path.is_file():
        return path.suffix.lower() == ".gguf"
    has_tokenizer = (path / "tokenizer.json").is_file() or (path / "tokenizer_config.json").is_file()
    return path.is_dir() and not has_tokenizer and any(path.glob("*.gguf"))
