"""KV-cache manager v2: byte-driven pool, blocks on demand, with a window reserve for every live request."""

from __future__ import annotations

from .manager import AdmissionPlan, KVCacheManager, SequenceBlocks


class KVCacheManagerV2(KVCacheManager):
    """Admission allocates the prompt plus its first window only. It also requires that the blocks left free
    afterwards cover the next window of every live request, the new one included (the `max_batch_size` largest
    needs, since no more requests run in one step). Later growth comes from `ensure_capacity`, which may fail
    when the pool runs out; the scheduler then preempts. A rewind frees whole blocks past the kept KV.
    """

    version = "v2"

    def window_need(self, seq: SequenceBlocks) -> int:
        """New blocks the request's next step may need: one window past what is already ensured."""
        return self._window_need(seq.num_ensured, seq.limit, len(seq.blocks))

    def _window_need(self, num_ensured: int, limit: int, num_held: int) -> int:
        # Block-boundary aware: the window first fills the free tail of the last held block, so the need is
        # blocks_for(ensured + window) - held, anywhere from 0 to ceil(window / block_size), not a flat count.
        return max(0, self.blocks_for(min(num_ensured + self.window_tokens, limit)) - num_held)

    def reserved_blocks(self) -> int:
        return self._capped_sum([self.window_need(s) for s in self._live()])

    def _admissible(self, plan: AdmissionPlan) -> bool:
        free_after = self.num_free_blocks - plan.num_revived - plan.num_new
        if free_after < 0:
            return False
        new_need = self._window_need(plan.first_extent, plan.limit, len(plan.reused) + plan.num_new)
        needs = [self.window_need(s) for s in self._live()] + [new_need]
        return free_after >= self._capped_sum(needs)

    def _release_past(self, seq: SequenceBlocks, num_tokens: int) -> None:
        # Blocks wholly past the kept KV hold only rejected drafts (never committed, never shared).
        keep = self.blocks_for(num_tokens)
        while len(seq.blocks) > keep:
            self._pool.decref(seq.blocks.pop())

    def _capped_sum(self, needs: list[int]) -> int:
        if self.max_batch_size is not None:
            needs = sorted(needs, reverse=True)[: self.max_batch_size]
        return sum(needs)
