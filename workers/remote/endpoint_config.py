"""What an endpoint run is told: the server's URL (with the credentials kept out of what is recorded), the local
tokenizer, and what the user declares about the engine behind the URL (spec-dec, KV cache, dtype), which selects
the reference entry because a server does not say."""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ...errors import UserError
from ..config import DTYPES
from ..kv_cache import KV_CACHE_MANAGERS
from ..loading.chat_template import ChatTemplateKwargs
from ..spec import SPEC_ALGORITHMS

# Long generations (GPQA's 32k-token answers on real models) take many minutes per request on a busy server.
DEFAULT_TIMEOUT_S = 3600.0
DEFAULT_RETRIES = 3
DEFAULT_CONCURRENCY = 8


@dataclass(frozen=True)
class EndpointConfig:
    """An OpenAI-compatible server and how to drive it. `url` may be the server root or any of its /v1 paths.

    api_key: sent as `Authorization: Bearer`; None falls back to $OPENAI_API_KEY (lm-eval's convention).
    served_model: the model id sent in requests; None asks /v1/models (which must then serve exactly one).
    tokenizer / model: where the local tokenizer comes from (see `load_local_tokenizer`).
    max_retries: retries after the first attempt of a request that failed transiently (connection, timeout, 5xx,
    408, 429); a 4xx answer is not retried. spec / max_draft_len / kv_cache / dtype / tp_size: declared, recorded.
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
    chat_template_kwargs: ChatTemplateKwargs = ChatTemplateKwargs()

    def __post_init__(self) -> None:
        if EndpointURL.parse(self.url).has_credentials and self.api_key:
            # Credentials in the URL become a basic-auth header, which would replace the bearer key.
            raise UserError("give the endpoint either credentials in its URL or an API key, not both")
        if self.concurrency < 1:
            raise UserError(f"endpoint concurrency must be positive, got {self.concurrency}")
        if self.max_retries < 0:
            raise UserError(f"endpoint retries must be >= 0, got {self.max_retries}")
        if not self.timeout_s > 0:
            raise UserError(f"endpoint timeout must be positive, got {self.timeout_s}")
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

    def __repr__(self) -> str:  # tracebacks and logs show the config: never its credentials
        shown = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("url", "api_key")}
        body = ", ".join(f"{k}={v!r}" for k, v in shown.items())
        key = "'***'" if self.api_key else "None"
        return f"EndpointConfig(url={EndpointURL.parse(self.url).public!r}, api_key={key}, {body})"

    def resolved_api_key(self) -> str | None:
        return self.api_key or os.environ.get("OPENAI_API_KEY") or None

    def headers(self) -> dict[str, str]:
        key = self.resolved_api_key()
        # Never an empty dict: lm-eval replaces an empty header with "Bearer $OPENAI_API_KEY".
        return {"Authorization": f"Bearer {key}"} if key else {"Accept": "application/json"}


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
        parts = urlsplit(url.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
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

    @property
    def completions(self) -> str:
        return self.root + "/v1/completions"

    @property
    def chat_completions(self) -> str:
        return self.root + "/v1/chat/completions"


def _redact_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.password:
        return url.replace(parts.password, "***")
    return url


def load_local_tokenizer(tokenizer: str | None, model: str | None) -> tuple[Any, str]:
    """(tokenizer, where it came from). `tokenizer`: a Hugging Face folder, a tokenizer name already in the local
    cache (nothing is downloaded), or anything `--model` takes (a preset, a .gguf file or a folder holding one).
    Without it, the tokenizer of `model` (its GGUF or HF folder). Raises UserError when neither gives one."""
    from ..loading.checkpoint import load_checkpoint

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
