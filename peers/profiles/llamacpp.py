"""llama.cpp's servers as a peer: llama-cpp-python's (`python -m llama_cpp.server`, the one the tests start) and
llama.cpp's own C++ `llama-server`. Their log table, the C++ server's spec-decode counters, and their request
defaults: both filter a sampled request (top_k 40, top_p 0.95, min_p 0.05; llama-cpp-python also repeat_penalty 1.1)
unless it says otherwise, so a sampled request states the neutral value of each filter the run did not set, and the
server samples from the distribution the run asked for (the one the sampled lossless gate judges).

Metrics (`llama-server --metrics`): `llamacpp:spec_decode_num_drafts_total` (verify steps),
`..._num_draft_tokens_total`, `..._num_accepted_tokens_total`: the vLLM shape, no per-position counters.
llama-cpp-python's server exports none of these. Scoring: the completions API's echo, as text where it refuses
token-id prompts (llama-cpp-python answers HTTP 500), audited one position back (`client.scoring_audit`).

The launch command (`LlamaCppServeCommand`, the one the tests and `selftest --clean` start): llama-cpp-python's
server on one thread (llama.cpp's threads spin while they wait for each other: on two shared cores, 2 threads made 16
tokens take 3-17 s instead of 0.5-0.8 s) with one seed; the logits of every position (`--logits_all true`) only where
logprobs are asked for (it answers any logprobs request with HTTP 500 without them; a drafting server keeps them
anyway); with `draft_len` it speculates by prompt-lookup decoding, what `--spec ngram --draft-len K` declares."""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

from ...event_types import CUDA_OOM, KV_EXHAUSTED, REQUEST_FAILED
from .profile import EngineProfile, PrometheusNames
from .signature import LogFormat, Signature

S = Signature

LOG = LogFormat(
    name="llamacpp",
    engine="llama.cpp server (llama-server, llama-cpp-python)",
    signatures=(
        S(
            "llamacpp.kv_no_space",
            KV_EXHAUSTED,
            r"failed to find free space in the KV cache",
            "no free space in the KV cache: retried with a smaller batch",
        ),
        S("llamacpp.cuda_malloc_failed", CUDA_OOM, r"cudaMalloc failed", "cudaMalloc failed"),
        # The HTTP 500 it answers; that the log repeats it is our assumption.
        S(
            "llamacpp.context_exceeded",
            REQUEST_FAILED,
            r"Context size has been exceeded",
            "a request failed: context size exceeded",
            confirmed=False,
        ),
    ),
    markers=("llama_", "ggml_", "llama.cpp", "llama_cpp"),
)

PROMETHEUS = PrometheusNames(
    exporter="llamacpp",
    cycles=("llamacpp:spec_decode_num_drafts",),
    draft_tokens=("llamacpp:spec_decode_num_draft_tokens",),
    accepted=("llamacpp:spec_decode_num_accepted_tokens",),
    position_label="position",
)

SERVED_MODEL = "smollm2-135m-q4_1"  # the name the tests and the clean matrix serve the embedded GGUF under


@dataclass(frozen=True)
class LlamaCppServeCommand:
    """One llama-cpp-python server (`python -m llama_cpp.server`): `argv` for Popen; `port` None leaves `--port` to
    the caller (a `--serve-cmd` template appends it)."""

    python: str
    model: str  # the GGUF file
    port: int | None = None
    n_ctx: int = 2048
    logits_all: bool = False
    draft_len: int | None = None  # prompt-lookup decoding of K tokens; None: plain decoding
    api_key: str | None = None
    served_model: str = SERVED_MODEL
    host: str = "127.0.0.1"

    @property
    def argv(self) -> list[str]:
        argv = [self.python, "-m", "llama_cpp.server", "--model", self.model, "--model_alias", self.served_model]
        argv += ["--n_ctx", str(self.n_ctx), "--n_threads", "1", "--n_threads_batch", "1", "--seed", "0"]
        argv += ["--logits_all", "true" if self.logits_all else "false", "--verbose", "false", "--host", self.host]
        if self.port is not None:
            argv += ["--port", str(self.port)]
        if self.api_key:
            argv += ["--api_key", self.api_key]
        if self.draft_len:
            argv += ["--draft_model", "prompt-lookup-decoding", "--draft_model_num_pred_tokens", str(self.draft_len)]
        return argv


PROFILE = EngineProfile(
    name="llamacpp",
    log=LOG,
    owners=("llamacpp", "llama.cpp", "llama-cpp"),
    loose_owners=("me",),  # llama-cpp-python's model cards
    prometheus=PROMETHEUS,
    neutral_sampling=MappingProxyType({"top_k": 0, "top_p": 1.0, "min_p": 0.0, "repeat_penalty": 1.0}),
    launch="LlamaCppServeCommand: python -m llama_cpp.server (the `peer` extra)",
)
