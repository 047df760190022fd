"""KV-cache manager v1: token-driven. Each request reserves its whole sequence at admission."""

from __future__ import annotations

from .manager import AdmissionPlan, KVCacheManager, RequestId, SequenceBlocks


class KVCacheManagerV1(KVCacheManager):
    """Admits a request only if blocks for its whole sequence (`limit` positions, less the shared prefix
    blocks) are free beyond what earlier requests were promised; after that `ensure_capacity` never fails.

    The reservation is a count, not physical blocks: blocks are taken from the pool as the sequence grows,
    so cached free blocks stay reusable for as long as possible. Invariant: free blocks >= promised blocks.
    A rewind keeps the blocks (they stay within the reservation and are overwritten next step).
    """

    version = "v1"

    def reserved_blocks(self) -> int:
        # Promised to live requests but not yet taken from the pool.
        return sum(max(0, self.blocks_for(s.limit) - len(s.blocks)) for s in self._live())

    def _admissible(self, plan: AdmissionPlan) -> bool:
        whole_sequence = self.blocks_for(plan.limit) - len(plan.reused)
        return self.num_free_blocks - plan.num_revived - self.reserved_blocks() >= whole_sequence

    def _release_past(self, seq: SequenceBlocks, num_tokens: int) -> None:
        # Keep the blocks: they are part of the reservation, and the next step overwrites the rejected KV.
        return

    def _on_shortage(self, request_id: RequestId, missing: int) -> bool:
        raise RuntimeError(
            f"KV cache v1: request {request_id!r} needs {missing} more blocks within its reservation but "
            f"only {self.num_free_blocks} are free; the reservation bookkeeping is broken"
        )
