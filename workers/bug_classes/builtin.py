"""The planted classes built into the engine's planted parts (`planted`: a substitute verifier, a target wrapper, a
spec-worker subclass, a leaking KV-cache manager, the rejection sampler's rules), in `--inject`'s order. A class
with its own code is a module of its own beside this one."""

from __future__ import annotations

from .declaration import LOSSLESS, PlantedClass

P = PlantedClass


def _rejection(name: str, help: str) -> PlantedClass:
    """A bug of the rejection sampler: judged in distribution, so only the sampled lossless gate can catch it."""
    return P(name, ("verifier", "rejection_sampler"), LOSSLESS, help, sampled=True, spec_sampling="rejection")


BUILTIN = (
    P("emit_rejected_draft", ("verifier",), LOSSLESS, "verification emits a rejected draft once", recurring=False),
    P(
        "draft_kv_into_target",
        ("proposer",),
        LOSSLESS,
        "the draft layer writes into the target's last KV layer (vLLM #25406)",
    ),
    P(
        "spec_alters_target",
        ("target",),
        LOSSLESS,
        "the capture rounds the target's residual stream while a spec worker is attached",
    ),
    P("rewind_keeps_rejected", ("verifier", "target"), LOSSLESS, "a rejected draft's KV is kept as committed"),
    P("accept_off_by_one", ("verifier",), LOSSLESS, "one draft more is accepted than verified"),
    P(
        "sample_key_shift",
        ("verifier",),
        LOSSLESS,
        "at temperature > 0 position p is sampled with p+1's key",
        sampled=True,
    ),
    P("verify_width_numerics", ("target",), LOSSLESS, "logits depend on the verify width (1 vs K+1)"),
    P("rewind_leaks_blocks", ("kv_cache",), "events", "KV blocks of rejected drafts are never returned to the pool"),
    P(
        "aux_layers_off_by_one",
        ("target",),
        "paired_acceptance",
        "the draft's features are read one layer late: ~5 % lower AL, same outputs",
    ),
    P(
        "draft_reads_neighbour_hidden",
        ("proposer",),
        LOSSLESS,
        "each speculating request's drafts start from its neighbour's hidden state (batch > 1 only)",
        in_matrix=False,  # fires only when two speculating requests share a step: the planted sweep judges it
    ),
    _rejection("rejection_greedy", "verification silently greedy at temperature > 0 (SGLang on ROCm / NPU)"),
    _rejection("residual_keeps_draft", "after a rejection the token is drawn from p with the rejected draft left in"),
    _rejection("accept_unit_temperature", "the accept test reads p at temperature 1, the plain sampler at T (vLLM V0)"),
    _rejection("spec_filter_order", "top-p then top-k on the spec path, top-k then top-p on the plain one (SGLang)"),
    _rejection("accept_neighbour_row", "the accept test of draft i reads row i + 1's probability"),
    _rejection("restart_stream", "the request's random stream restarts from its seed at every verification step"),
)
