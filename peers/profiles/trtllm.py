"""TensorRT-LLM (`trtllm-serve`, PyTorch backend) as a peer: its log table, its spec-decode counters and KV gauge in
Prometheus text, and its JSON iteration stats. It cannot run on these machines: its tests read recorded pages and
log lines (tests/peers/fixtures/trtllm).

Metrics, Prometheus text (/prometheus/metrics, or /metrics): `trtllm_spec_decode_num_draft_tokens_total` and
`..._num_accepted_tokens_total` (summed from its iteration stats; accepted excludes the bonus) and, per request,
`..._drafted_tokens_total{token_position}` / `..._accepted_tokens_total{token_position}`. It has no cycle counter:
cycles = drafted tokens at position 0 (every cycle drafts position 0), or, without per-position counters, draft
tokens / K for a chain of the declared K. Dynamo re-exports the same names with a `trtllm:` prefix. KV usage:
`trtllm_kv_cache_utilization`.
JSON iteration stats on /metrics (with iteration stats on): a list of the iterations since the last read, each with
`specDecodingStats` and `kvCacheStats`; reading drains the list (`read_json_metrics`, `read_json_kv_usage` read
that shape by content). Responses carry no acceptance counts."""

from __future__ import annotations

from typing import Any

from ...event_types import (
    ENGINE_DEAD,
    FORWARD_ERROR,
    SPEC_STATE_LEAK,
    SPEC_STATE_RESTORED,
    WARMUP_OOM,
    WARMUP_SKIPPED,
)
from .counters import Counters
from .profile import EngineProfile, PrometheusNames
from .signature import LogFormat, Signature

S = Signature

LOG = LogFormat(
    name="trtllm",
    engine="TensorRT-LLM (trtllm-serve, PyTorch backend)",
    signatures=(
        S(
            "trtllm.warmup_oom",
            WARMUP_OOM,
            r"OOM during general warmup with (?P<num_tokens>\d+) tokens, (?P<num_gen_tokens>\d+) generation tokens\. "
            r"Skipping",
            "general warmup ran out of memory at {num_tokens} tokens ({num_gen_tokens} generation)",
            fields=(("phase", "general"),),
        ),
        S(
            "trtllm.warmup_skipped",
            WARMUP_SKIPPED,
            r"Skipping general warmup with (?P<num_tokens>\d+) tokens \((?P<num_gen_tokens>\d+) generation\): not "
            r"enough KV cache space",
            "general warmup at {num_tokens} tokens skipped: not enough KV cache space",
        ),
        S(
            "trtllm.warmup_shape_skipped",
            WARMUP_SKIPPED,
            r"Skipping warmup shape \((?P<shape>.*)\): not enough KV "
            r"cache space",
            "warmup shape ({shape}) skipped: not enough KV cache space",
        ),
        S(
            "trtllm.cuda_graph_warmup_skipped",
            WARMUP_SKIPPED,
            r"Skipping CUDA graph warmup \((?P<label>.*?)\) for batch size=(?P<batch_size>\d+), "
            r"draft_len=(?P<draft_len>\d+): not enough KV cache space",
            "CUDA-graph warmup ({label}) at batch size {batch_size} skipped: not enough KV cache space",
        ),
        S(
            "trtllm.warmup_desync",
            ENGINE_DEAD,
            r"Warmup batch creation failed on TP rank\(s\) (?P<ranks>.*?) but succeeded on others",
            "warmup failed on TP rank(s) {ranks} only: a collective deadlock",
            fatal=True,
        ),
        # A bare `assert len(self._saved_tensors) == 0` (AttentionMetadata.prepare_for_spec_dec): no message, so the
        # traceback's source line is the signature. Then "Encountered an error in forward function: " (empty).
        S(
            "trtllm.saved_tensors_assert",
            SPEC_STATE_LEAK,
            r"assert len\(self\._saved_tensors\) == 0",
            "attention metadata saved for spec-dec was never restored (prepare_for_spec_dec's assertion)",
            in_traceback=True,
            fields=(("detected_at", "prepare_for_spec_dec"),),
        ),
        S(
            "trtllm.spec_state_restored",
            SPEC_STATE_RESTORED,
            r"Spec-dec worker forward failed between prepare_for_spec_dec and restore_from_spec_dec; restoring attn "
            r"metadata state",
            "spec-dec worker forward failed; attention metadata restored",
        ),
        S(
            "trtllm.forward_error",
            FORWARD_ERROR,
            r"Encountered an error in forward function: ?(?P<error>.*)$",
            "forward failed: {error}",
            traceback="before",
        ),
        S(
            "trtllm.sampling_error",
            FORWARD_ERROR,
            r"Encountered an error in sampling: ?(?P<error>.*)$",
            "sampling failed: {error}",
            traceback="before",
            fields=(("phase", "sampling"),),
        ),
        # The executor thread is dead after this: in-flight requests get the error, later ones hang (#13318).
        S(
            "trtllm.event_loop_died",
            ENGINE_DEAD,
            r"Error in event loop: ?(?P<error>.*)$",
            "executor loop died: {error}",
            fatal=True,
            traceback="after",
        ),
    ),
    line_tags=(r"^\[\d\d/\d\d/\d{4}-\d\d:\d\d:\d\d\] \[TRT-LLM\](?: \[MPI_Rank \d+\])? \[[FEWIV]\] ?",),
    rank_pattern=r"\[MPI_Rank (?P<server_rank>\d+)\]",
    markers=("[TRT-LLM]", "[TensorRT-LLM]", "tensorrt_llm"),
)

PROMETHEUS = PrometheusNames(
    exporter="trtllm",
    draft_tokens=("trtllm_spec_decode_num_draft_tokens", "trtllm:spec_decode_num_draft_tokens"),
    accepted=("trtllm_spec_decode_num_accepted_tokens", "trtllm:spec_decode_num_accepted_tokens"),
    accepted_per_pos=("trtllm_spec_decode_accepted_tokens", "trtllm:spec_decode_accepted_tokens"),
    drafted_per_pos=("trtllm_spec_decode_drafted_tokens", "trtllm:spec_decode_drafted_tokens"),
    position_label="token_position",
)
KV_GAUGES = ("trtllm_kv_cache_utilization", "trtllm:kv_cache_utilization")


def read_json_metrics(data: Any) -> Counters | None:
    """TensorRT-LLM's JSON iteration stats (a list of per-iteration dicts); None when it is not such a list."""
    if not isinstance(data, list) or not all(isinstance(it, dict) for it in data):
        return None
    out = Counters(
        source="trtllm iteration stats (JSON specDecodingStats)", cycles=0, draft_tokens=0, accepted=0, drains=True
    )
    for it in data:
        spec = it.get("specDecodingStats") or {}
        out.cycles += float(spec.get("numRequestsWithDraftTokens", 0))
        out.draft_tokens += float(spec.get("numDraftTokens", 0))
        out.accepted += float(spec.get("numAcceptedTokens", 0))
    return out


def read_json_kv_usage(data: Any) -> tuple[str, float] | None:
    """The last iteration's `kvCacheStats` in its JSON iteration stats: (source, used fraction); None otherwise."""
    stats = [it.get("kvCacheStats") for it in data if isinstance(it, dict)] if isinstance(data, list) else []
    stats = [s for s in stats if isinstance(s, dict) and s.get("maxNumBlocks")]
    if not stats:
        return None
    last = stats[-1]
    return "kvCacheStats (TensorRT-LLM iteration stats)", float(last.get("usedNumBlocks", 0)) / last["maxNumBlocks"]


PROFILE = EngineProfile(
    name="trtllm",
    log=LOG,
    owners=("tensorrt_llm", "tensorrt-llm", "trtllm"),
    prometheus=PROMETHEUS,
    kv_gauges=KV_GAUGES,
    read_json_metrics=read_json_metrics,
    read_json_kv_usage=read_json_kv_usage,
)
