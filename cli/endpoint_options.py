"""Options of `run --endpoint`: evaluate any OpenAI-compatible server (ours from `specdec-eval serve`, trtllm-serve,
vLLM, SGLang, llama.cpp). The engine flags (--spec, --draft-len, --kv-cache, --dtype) then declare what runs behind
the URL, which picks the reference entry; --model names where the local tokenizer comes from."""

from __future__ import annotations

from typing import Annotated

import typer

from ..workers.remote.endpoint_config import DEFAULT_CONCURRENCY, DEFAULT_RETRIES, DEFAULT_TIMEOUT_S

ENDPOINT = "Endpoint (any OpenAI-compatible server)"

Endpoint = Annotated[
    str | None,
    typer.Option("--endpoint", help="Base URL of an OpenAI-compatible server, e.g. http://127.0.0.1:8000 (its "
                 "/v1/completions is used; --chat for /v1/chat/completions).", rich_help_panel=ENDPOINT),
]  # fmt: skip
Chat = Annotated[
    bool,
    typer.Option("--chat", help="Use the chat completions API (the server applies its chat template).",
                 rich_help_panel=ENDPOINT),
]  # fmt: skip
Tokenizer = Annotated[
    str | None,
    typer.Option("--tokenizer", help="Local tokenizer (a Hugging Face folder or cached name) for counting tokens "
                 "and token ids; default: the one of --model.", rich_help_panel=ENDPOINT),
]  # fmt: skip
ServedModel = Annotated[
    str | None,
    typer.Option("--served-model", help="Model id to request (default: the one /v1/models lists).",
                 rich_help_panel=ENDPOINT),
]  # fmt: skip
ApiKey = Annotated[
    str | None,
    typer.Option("--api-key", help="Bearer key (default: $OPENAI_API_KEY); never recorded.", rich_help_panel=ENDPOINT),
]
Concurrency = Annotated[
    int,
    typer.Option("--concurrency", min=1, help="Requests in flight at once.", rich_help_panel=ENDPOINT),
]
RequestTimeout = Annotated[
    float,
    typer.Option("--request-timeout", min=1.0, help="Seconds one request may take (long reasoning outputs need "
                 "many minutes).", rich_help_panel=ENDPOINT),
]  # fmt: skip
RequestRetries = Annotated[
    int,
    typer.Option("--request-retries", min=0, help="Retries of a request that failed transiently (connection, "
                 "timeout, 5xx, 429); then it is a recorded failure, never an empty answer.", rich_help_panel=ENDPOINT),
]  # fmt: skip
BaselineEndpoint = Annotated[
    str | None,
    typer.Option("--baseline-endpoint", help="The same engine without speculation: evaluated first, it is the "
                 "lossless gate's baseline.", rich_help_panel=ENDPOINT),
]  # fmt: skip
BaselineRun = Annotated[
    str,
    typer.Option("--baseline", help="The lossless gate's baseline of a spec-dec run: 'paired' (decoded beside the "
                 "run from one prefill per prompt, recorded as its own run; our engine), 'separate' (a run of its "
                 "own first), or a recorded run (id or folder) to compare with.", rich_help_panel="Evaluation"),
]  # fmt: skip
Control = Annotated[
    bool | None,
    typer.Option("--control/--no-control", help="The lossless gate's noise floor outside float32: decode the plain "
                 "side again at another batch shape (our engine: max batch size 1; an endpoint: the baseline server "
                 "at concurrency 1) and judge each divergence's logit margin against what that control measured. "
                 "Default: made for a spec-dec run in a dtype that is not exact when none is recorded; reused.",
                 rich_help_panel="Evaluation"),
]  # fmt: skip

DEFAULTS = {"concurrency": DEFAULT_CONCURRENCY, "timeout": DEFAULT_TIMEOUT_S, "retries": DEFAULT_RETRIES}
