"""Log-likelihood of a continuation given a context: one prefill forward with logits at every position.

This serves lm-eval's `loglikelihood` requests (multiple-choice variants). It goes through the executor's model,
KV pool, KV bookkeeping and attention metadata, so it scores exactly what generation would compute, and frees its
blocks after.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ...errors import UserError
from ..model.attn_metadata import BatchEntry
from .executor import Executor


@torch.inference_mode()
def score_continuation(
    executor: Executor, context: Sequence[int], continuation: Sequence[int], limit: int
) -> tuple[float, bool]:
    """(sum of log p(continuation | context), whether greedy decoding would produce the continuation). Contexts
    longer than `limit` tokens in all are cut from the left, as lm-eval's own backends do."""
    if not continuation:
        raise ValueError("an empty continuation has no log-likelihood")
    tokens = list(context) + list(continuation)
    tokens = tokens[-limit:]
    feed = tokens[:-1]  # the last token is only ever a target
    if not feed:
        raise ValueError("scoring needs at least one context token")
    request_id = ("score", id(tokens))  # never collides with generate()'s integer ids
    kv_manager = executor.scheduler.kv
    if kv_manager.admit(request_id, feed, len(feed)) is None:
        raise UserError(f"the KV cache cannot hold a {len(feed)}-token sequence for scoring; raise --device-memory")
    try:
        table = kv_manager.block_table(request_id)
        meta = executor.meta.prepare([BatchEntry(request_id, 0, len(feed), table, True)])
        input_ids = torch.tensor(feed, dtype=torch.int64, device=meta.device)
        hidden, _ = executor.model(input_ids, meta, executor.kv)
        n = min(len(continuation), len(feed))
        logprobs = executor.model.compute_logits(hidden[-n:]).log_softmax(dim=-1)
        targets = torch.tensor(tokens[-n:], dtype=torch.int64, device=logprobs.device)
        total = float(logprobs.gather(-1, targets[:, None]).sum())
        greedy = bool((logprobs.argmax(dim=-1) == targets).all())
        return total, greedy
    finally:
        kv_manager.free(request_id)
