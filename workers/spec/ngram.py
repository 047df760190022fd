"""NgramWorker: prompt-lookup drafting (vLLM's `ngram` method, llama.cpp's lookup decoding). No draft model: the
K proposals are the tokens that followed the most recent earlier occurrence of the request's last n tokens in its
own prompt and output. The target verifies them in the engine step like any drafts (the sampling package:
greedy, or the keyed sampling rule against a one-hot proposal), so the method is lossless; only the number of
tokens per target step changes.

Every generation step carries exactly K drafts (the scheduler sizes steps by 1 + K), so when nothing matches the
proposal is the last token repeated: verification rejects what is wrong at the cost of K extra target positions.
"""

from __future__ import annotations

from ..registry import NGRAM_DEFAULT_SIZE
from .base import DraftInput, Drafts, SpecContext, SpecWorkerBase


def propose_ngram(history: list[int], n: int, k: int) -> list[int]:
    """The K tokens that followed the most recent earlier occurrence of history's last n tokens. A match near the
    end runs into the tokens it predicts: the continuation is read from history extended by the proposals so far,
    which repeats a periodic tail (the common case of a loop). No match (or a history of n tokens or fewer): the
    last token, K times."""
    size = len(history)
    if size <= n:
        return [history[-1]] * k
    suffix = history[size - n :]
    last = suffix[-1]
    for start in range(size - n - 1, -1, -1):  # the most recent earlier occurrence first
        if history[start + n - 1] == last and history[start : start + n] == suffix:
            seq = list(history)
            for i in range(k):
                seq.append(seq[start + n + i])  # start + n + i < len(seq): always defined
            return seq[size:]
    return [history[-1]] * k


class NgramWorker(SpecWorkerBase):
    """Proposes from each request's tokens; nothing of the target's step (captured layers, KV) is read."""

    def __init__(self, context: SpecContext) -> None:
        super().__init__(context)
        self.n = context.spec.ngram_size or NGRAM_DEFAULT_SIZE

    def _forward_impl(self, step: DraftInput) -> Drafts:
        # The target wrote KV for every draft it verified; the executor discards what was rejected, as for Eagle3.
        self.fault_point("draft_step", 0)
        # Nothing is allocated on the device; this is the forward's last allocation point all the same, where
        # `--inject warmup_oom` fires during the warmup (the cleanup then discards the step's draft KV, as for Eagle3).
        self.need_memory(0, "ngram proposals", last_of_forward=True)
        return Drafts(
            [
                propose_ngram(it.request.all_token_ids + emitted, self.n, self.K)
                for it, emitted in zip(step.items, step.emitted, strict=True)
            ]
        )
