"""SGLang (`python -m sglang.launch_server`) as a peer: its log table, its KV gauge, its server-lifetime acceptance
length on /server_info, and the acceptance counts each response's `meta_info` carries. It cannot run on these
machines: its tests read recorded pages, responses and log lines (tests/peers/fixtures/sglang).

Metrics, JSON on /server_info (older: /get_server_info): `avg_spec_accept_length` (top level or per data-parallel
rank in `internal_states`) = accepted tokens incl. the bonus / verify steps, i.e. our AL, but averaged over the
server's life without the counts, so no delta can be formed (`read_json_metrics`). KV usage
(`--enable-metrics`): `sglang:token_usage`, a fraction of the pool in use (labels model_name, engine_type, tp_rank,
pp_rank). Its log: "Prefill batch, ..." and "Decode batch, #running-req: ..., accept len: ..., ..." (older
releases: "Decode batch. ...").

Per response: `meta_info` (top level of the native /generate answer; the choices of its OpenAI-compatible
/v1/completions carry none, so a run over that API reads the server-lifetime figure only) with `spec_verify_ct`
(verify steps) and `completion_tokens`. The first output token comes from prefill, not from a verify step, so
accepted drafts = completion_tokens - 1 - spec_verify_ct (SGLang's own AL figure, completion_tokens /
spec_verify_ct, counts that token too). Newer SGLang adds `spec_accept_token_num` / `spec_draft_token_num`, read
when present; without them the draft tokens are verify steps x the declared K (a chain of K drafts per step), and
the dict says so.
It refuses request fields it does not know (and top_k 0): it is sent no extension it was not asked for."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...event_types import (
    CUDA_GRAPH_FAILED,
    CUDA_OOM,
    ENGINE_DEAD,
    KV_BLOCK_LEAK,
    KV_EXHAUSTED,
    REQUEST_FAILED,
)
from ...workers.spec.metrics import AcceptanceStats
from .acceptance_counts import count, possible
from .counters import Counters
from .profile import EngineProfile
from .signature import LogFormat, Signature

S = Signature

LOG = LogFormat(
    name="sglang",
    engine="SGLang (sglang.launch_server)",
    signatures=(
        S(
            "sglang.retract",
            KV_EXHAUSTED,
            r"KV cache pool is full\. Retract requests\. #retracted_reqs: "
            r"(?P<retracted>\d+)",
            "KV cache pool full: {retracted} request(s) retracted",
        ),
        S(
            "sglang.abort_after_retract",
            REQUEST_FAILED,
            r"Out of memory even after retracting all other requests in the decode batch\. Aborting the last request",
            "a request aborted: out of KV memory even after retracting the rest of its batch",
        ),
        S(
            "sglang.prefill_oom",
            KV_EXHAUSTED,
            r"Prefill out of memory\. Try to lower your batch size",
            "prefill out of KV memory",
            fields=(("phase", "prefill"),),
        ),
        S(
            "sglang.decode_oom",
            KV_EXHAUSTED,
            r"Decode out of memory",
            "decode out of KV memory",
            fields=(("phase", "decode"),),
        ),
        S(
            "sglang.not_enough_memory",
            CUDA_OOM,
            r"Not enough memory\. Please try to increase --mem-fraction-static",
            "not enough device memory at startup",
            fields=(("phase", "startup"),),
        ),
        S(
            "sglang.cuda_graph_failed",
            CUDA_GRAPH_FAILED,
            r"Capture cuda graph failed: ?(?P<error>.*)$",
            "CUDA-graph capture failed: {error}",
        ),
        S(
            "sglang.scheduler_exception",
            ENGINE_DEAD,
            r"Scheduler hit an exception: ?(?P<error>.*)$",
            "scheduler died: {error}",
            fatal=True,
            traceback="after",
        ),
        # Its idle self-check (a KV memory-leak check in the scheduler); the exact text is unconfirmed.
        S(
            "sglang.memory_leak",
            KV_BLOCK_LEAK,
            r"(?i)memory leak detected",
            "the engine found leaked KV memory",
            confirmed=False,
        ),
    ),
    line_tags=(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?: [A-Z]+\d+)*\] ?",),
    rank_pattern=r"\bTP(?P<server_rank>\d+)\]",
    markers=("sglang", "Decode batch, #running-req", "Prefill batch"),
)

KV_GAUGES = ("sglang:token_usage",)
SOURCE = "sglang per-request meta_info.spec_verify_ct"


def read_acceptance(response: Mapping[str, Any], declared_k: int | None) -> dict[str, Any] | None:
    """The first `meta_info` of one response (top level, then per choice) with verify steps, in our layout."""
    for meta in _meta_infos(response):
        found = _from_meta_info(meta, declared_k)
        if found is not None:
            return found
    return None


def _from_meta_info(meta: Mapping[str, Any], declared_k: int | None) -> dict[str, Any] | None:
    verify, tokens = count(meta.get("spec_verify_ct")), count(meta.get("completion_tokens"))
    if not verify or tokens is None:
        return None
    accepted = count(meta.get("spec_accept_token_num"))
    drafted = count(meta.get("spec_draft_token_num"))
    notes = []
    if accepted is None:
        accepted = max(0, tokens - 1 - verify)
        notes.append("accepted = completion_tokens - 1 - spec_verify_ct")
    k = declared_k or 0
    if drafted is None:
        drafted = verify * k
        notes.append(f"draft tokens = verify steps x declared K {k}")
    stats = possible(AcceptanceStats(k, verify, drafted, accepted), SOURCE)
    out = {**stats.to_dict(), "source": SOURCE}
    out["per_position_rate"], out["accepted_per_position"] = [], []  # SGLang reports no per-position counts
    out["note"] += "; " + "; ".join([*notes, "no per-position counts"])
    return out


def _meta_infos(response: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    found = [response.get("meta_info")]
    choices = response.get("choices")
    for choice in choices if isinstance(choices, list) else []:
        if isinstance(choice, Mapping):
            found.append(choice.get("meta_info"))
    return [m for m in found if isinstance(m, Mapping)]


def read_json_metrics(data: Any) -> Counters | None:
    """SGLang's server info: avg_spec_accept_length, top level or per DP rank (their mean); None without it."""
    if not isinstance(data, dict):
        return None
    states = data.get("internal_states") if isinstance(data.get("internal_states"), list) else []
    values = [s.get("avg_spec_accept_length") for s in states if isinstance(s, dict)]
    values = [float(v) for v in values if isinstance(v, int | float)]
    if not values and isinstance(data.get("avg_spec_accept_length"), int | float):
        values = [float(data["avg_spec_accept_length"])]
    if not values:
        return None
    return Counters(source="sglang avg_spec_accept_length (JSON server info)", average_length=sum(values) / len(values))


PROFILE = EngineProfile(
    name="sglang",
    log=LOG,
    owners=("sglang",),
    kv_gauges=KV_GAUGES,
    read_acceptance=read_acceptance,
    response_keys=("meta_info",),
    choice_keys=("meta_info",),
    read_json_metrics=read_json_metrics,
)
