"""Our own `specdec-eval serve` as a peer: its log table (our events, one line each, plus the serving loop's
failures); everything else is vLLM's shape on purpose (the same metric names, KV gauge, per-response acceptance
object and extensions), so the same readers serve both. It names answer tokens by id in logprobs but does not return
the answer's token ids (`return_token_ids`)."""

from __future__ import annotations

from ...event_types import ENGINE_DEAD, FORWARD_ERROR
from . import vllm
from .profile import SCORES_BY_PROMPT_LOGPROBS, EngineProfile
from .signature import LogFormat, Signature

S = Signature

LOG = LogFormat(
    name="specdec-eval",
    engine="specdec-eval serve (ours)",
    signatures=(
        # Our engine's every event, one line each (`events.event_line`): the line carries its type.
        S("specdec.event_line", None, r"specdec-eval event: \{", "{type}"),
        S(
            "specdec.engine_loop_failed",
            ENGINE_DEAD,
            r"engine loop failed",
            "engine loop died",
            fatal=True,
            traceback="after",
        ),
        S(
            "specdec.engine_step_failed",
            FORWARD_ERROR,
            r"engine step failed",
            "engine step failed",
            traceback="after",
            fields=(("phase", "step"),),
        ),
    ),
    markers=("specdec-eval event:", "specdec-eval serve:"),
)

PROFILE = EngineProfile(
    name="specdec-eval",
    log=LOG,
    owners=("specdec-eval",),
    prometheus=vllm.PROMETHEUS,
    kv_gauges=vllm.KV_GAUGES,
    read_acceptance=vllm.read_acceptance,
    response_keys=vllm.PROFILE.response_keys,
    names_tokens_by_id=True,
    scores=SCORES_BY_PROMPT_LOGPROBS,
    launch="specdec-eval serve",
)
