"""The options of `run --endpoint`: evaluate any OpenAI-compatible server (ours from `specdec-eval serve`,
trtllm-serve, vLLM, SGLang, llama.cpp), declared once: each field's default is its flag's, its metadata the flag
(specdec_eval/option_fields.py). The engine flags (--spec, --draft-len, --kv-cache, --dtype) then declare what runs
behind the URL, which picks the reference entry; --model names where the local tokenizer comes from. `configs` builds
the server's EndpointConfig and its baseline server's."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...option_fields import flag
from ..config import EngineConfig
from .endpoint_config import DEFAULT_CONCURRENCY, DEFAULT_RETRIES, DEFAULT_TIMEOUT_S, EndpointConfig

ENDPOINT = "Endpoint (any OpenAI-compatible server)"


@dataclass(frozen=True)
class EndpointOptions:
    endpoint: str | None = field(default=None, metadata=flag(
        "--endpoint", group=ENDPOINT,
        help="Base URL of an OpenAI-compatible server, e.g. http://127.0.0.1:8000 (its /v1/completions is used; "
             "--chat for /v1/chat/completions)."))  # fmt: skip
    chat: bool = field(
        default=False,
        metadata=flag(
            "--chat", group=ENDPOINT, help="Use the chat completions API (the server applies its chat template)."
        ),
    )
    tokenizer: str | None = field(default=None, metadata=flag(
        "--tokenizer", group=ENDPOINT,
        help="Local tokenizer (a Hugging Face folder or cached name) for counting tokens and token ids; default: the "
             "one of --model."))  # fmt: skip
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
    request_timeout: float = field(default=DEFAULT_TIMEOUT_S, metadata=flag(
        "--request-timeout", min=1.0, group=ENDPOINT,
        help="Seconds one request may take (long reasoning outputs need many minutes)."))  # fmt: skip
    request_retries: int = field(default=DEFAULT_RETRIES, metadata=flag(
        "--request-retries", min=0, group=ENDPOINT,
        help="Retries of a request that failed transiently (connection, timeout, 5xx, 429); then it is a recorded "
             "failure, never an empty answer."))  # fmt: skip
    baseline_endpoint: str | None = field(
        default=None,
        metadata=flag(
            "--baseline-endpoint",
            group=ENDPOINT,
            help="The same engine without speculation: evaluated first, it is the lossless gate's baseline.",
        ),
    )

    def configs(self, engine: EngineConfig, declares_kv_cache: bool) -> tuple[EndpointConfig, EndpointConfig | None]:
        """The server under test and its baseline server (None: no --baseline-endpoint). The engine flags declare
        what serves the URL: --spec eagle3 --draft-len K (it speculates), --dtype, --seed, --kv-cache (only when
        given: a server does not say which it runs); --model is where the local tokenizer comes from."""
        if self.endpoint is None:
            raise ValueError("no --endpoint")
        declared = dict(model=engine.model, tokenizer=self.tokenizer, chat=self.chat, served_model=self.served_model,
                        api_key=self.api_key, concurrency=self.concurrency, timeout_s=self.request_timeout,
                        max_retries=self.request_retries, seed=engine.seed, dtype=engine.dtype,
                        kv_cache=engine.kv_cache.version if declares_kv_cache else None)  # fmt: skip
        spec = engine.spec
        target = EndpointConfig(url=self.endpoint, spec=spec.algorithm if spec else None,
                                max_draft_len=spec.max_draft_len if spec else 0, **declared)  # fmt: skip
        baseline = EndpointConfig(url=self.baseline_endpoint, **declared) if self.baseline_endpoint else None
        return target, baseline
