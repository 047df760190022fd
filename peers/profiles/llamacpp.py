"""llama.cpp's servers as a peer: llama-cpp-python's (`python -m llama_cpp.server`, the one the tests start) and
llama.cpp's own C++ `llama-server`. Their log table, the C++ server's spec-decode counters, and their request
defaults: both filter a sampled request (top_k 40, top_p 0.95, min_p 0.05; llama-cpp-python also repeat_penalty 1.1)
unless it says otherwise, so a sampled request states the neutral value of each filter the run did not set, and the
server samples from the distribution the run asked for (the one the sampled lossless gate judges).

Metrics (`llama-server --metrics`): `llamacpp:spec_decode_num_drafts_total` (verify steps),
`..._num_draft_tokens_total`, `..._num_accepted_tokens_total`: the vLLM shape, no per-position counters.
llama-cpp-python's server exports none of these. Scoring: the completions API's echo, as text where it refuses
token-id prompts (llama-cpp-python answers HTTP 500), audited one position back (`client.scoring_audit`)."""

from __future__ import annotations

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

PROFILE = EngineProfile(
    name="llamacpp",
    log=LOG,
    owners=("llamacpp", "llama.cpp", "llama-cpp"),
    loose_owners=("me",),  # llama-cpp-python's model cards
    prometheus=PROMETHEUS,
    neutral_sampling=MappingProxyType({"top_k": 0, "top_p": 1.0, "min_p": 0.0, "repeat_penalty": 1.0}),
    launch="python -m llama_cpp.server (the `peer` extra; tests/llama_server.py)",
)
