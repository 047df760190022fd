"""Log-likelihood of a continuation given a context: one prefill forward with logits at every position.

This serves lm-eval's `loglikelihood` requests (multiple-choice variants). It reuses the engine's model, KV
pool and attention metadata, so it scores exactly what generation would compute, and frees its blocks after.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from .attn_metadata import BatchEntry
from .errors import UserError

if TYPE_CHECKING:
    from .engine import Engine


@torch.inference_mode()
def score_continuation(engine: Engine, context: Sequence[int], continuation: Sequence[int]) -> tuple[float, bool]:
    """(sum of log p(continuation | context), whether greedy decoding would produce the continuation)."""
    if not continuation:
        raise ValueError("an empty continuation has no log-likelihood")
    tokens = list(context) + list(continuation)
    limit = min(engine.max_seq_len, engine.config.max_num_tokens) + 1
    tokens = tokens[-limit:]  # left-truncate long contexts, as lm-eval's own backends do
    feed = tokens[:-1]  # the last token is only ever a target
    if not feed:
        raise ValueError("scoring needs at least one context token")
    request_id = ("score", id(tokens))  # never collides with generate()'s integer ids
    if engine.kv_manager.admit(request_id, feed, len(feed)) is None:
        raise UserError(f"the KV cache cannot hold a {len(feed)}-token sequence for scoring; raise --device-memory")
    try:
        table = engine.kv_manager.block_table(request_id)
        meta = engine.attn_meta.prepare([BatchEntry(request_id, 0, len(feed), table, True)])
        input_ids = torch.tensor(feed, dtype=torch.int64, device=engine.device)
        hidden, _ = engine.model(input_ids, meta, engine.kv_pool)
        n = min(len(continuation), len(feed))
        logprobs = engine.model.compute_logits(hidden[-n:]).log_softmax(dim=-1)
        targets = torch.tensor(tokens[-n:], dtype=torch.int64, device=logprobs.device)
        total = float(logprobs.gather(-1, targets[:, None]).sum())
        greedy = bool((logprobs.argmax(dim=-1) == targets).all())
        return total, greedy
    finally:
        engine.kv_manager.free(request_id)
