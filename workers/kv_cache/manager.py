"""KV-cache manager: the interface the scheduler uses, keyed by request id, over one `BlockPool`.

The base class does the shared bookkeeping (block tables, prefix reuse, commit, rewind, free); `v1` and
`v2` decide only what admission must reserve and what a rewind gives back.

Positions: a request's KV position i holds the keys/values of its i-th token. The last sampled token has no
KV yet, and one engine step writes at most `window_tokens` positions (1 + max_draft_len). So a request whose
final length is `max_total_tokens` may touch up to `max_total_tokens + window_tokens - 1` positions: the
drafts of its last step can run past the end. That is its `limit`, and what v1 reserves.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from .pool import BlockPool, block_hash

RequestId = Hashable


@dataclass
class SequenceBlocks:
    """What the manager knows about one live request."""

    limit: int  # most KV positions the request may ask for (see module docstring)
    blocks: list[int] = field(default_factory=list)  # block table, in position order
    hashes: list[bytes] = field(default_factory=list)  # chained hashes of its committed full blocks
    num_committed: int = 0  # positions [0, num_committed) hold final KV
    num_ensured: int = 0  # positions [0, num_ensured) are covered by `blocks` and may be written


@dataclass(frozen=True)
class AdmissionPlan:
    """An admission worked out without touching the pool, so that a refusal has no side effect."""

    prompt_len: int
    limit: int
    reused: list[int]  # cached blocks to share, in position order
    hashes: list[bytes]  # their chained hashes
    first_extent: int  # positions covered right away: the prompt plus the first window
    num_new: int  # blocks to allocate now
    num_revived: int  # reused blocks that are free at the moment (taking them shrinks the free list)


class KVCacheManager(ABC):
    """Paged KV bookkeeping for the scheduler. Subclasses set `version` and the admission policy."""

    version: ClassVar[str]

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        *,
        enable_block_reuse: bool = True,
        window_tokens: int = 1,
        max_batch_size: int | None = None,
        leaks_on_rewind: Callable[[], bool] | None = None,
    ) -> None:
        """leaks_on_rewind: the planted bug `rewind_leaks_blocks`: asked on every rewind
        that would give blocks back; True drops them from the request's table without returning them to the pool."""
        if window_tokens < 1:
            raise ValueError(f"window_tokens must be >= 1, got {window_tokens}")
        if max_batch_size is not None and max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        self._pool = BlockPool(num_blocks, block_size)
        self._reuse = enable_block_reuse
        self._window = window_tokens
        self._max_batch_size = max_batch_size
        self._seqs: dict[RequestId, SequenceBlocks] = {}
        self._leaks_on_rewind = leaks_on_rewind
        self._holder: dict[int, RequestId] = {}  # block id -> the request that last took it from the pool
        self._peak_used = 0
        self._reuse_hit_tokens = 0
        self._reuse_queried_tokens = 0
        self._num_admitted = 0
        self._num_refused = 0
        self._num_capacity_failures = 0

    # ----- sizes -----

    @property
    def num_blocks(self) -> int:
        return self._pool.num_blocks

    @property
    def block_size(self) -> int:
        return self._pool.block_size

    @property
    def num_free_blocks(self) -> int:
        return self._pool.num_free_blocks

    @property
    def window_tokens(self) -> int:
        return self._window

    @property
    def max_batch_size(self) -> int | None:
        return self._max_batch_size

    @property
    def pool(self) -> BlockPool:
        """The underlying pool, for inspection (tests, stats); the scheduler should not mutate it."""
        return self._pool

    def blocks_for(self, num_tokens: int) -> int:
        """Blocks needed to hold `num_tokens` positions."""
        return -(-num_tokens // self.block_size)

    # ----- the scheduler's interface -----

    def has(self, request_id: RequestId) -> bool:
        return request_id in self._seqs

    def block_table(self, request_id: RequestId) -> list[int]:
        return list(self._seq(request_id).blocks)

    def admit(
        self, request_id: RequestId, prompt_token_ids: Sequence[int], max_total_tokens: int, reuse: bool = True
    ) -> int | None:
        """Take a new request. Returns how many leading prompt tokens already have KV in shared cached blocks
        (0 without reuse), or None if the policy cannot admit it now (nothing is changed then). reuse=False: no
        cached block is taken, whatever the pool holds (teacher-forced scoring recomputes every position in blocks
        of its own, so it never writes into blocks other requests read)."""
        if request_id in self._seqs:
            raise ValueError(f"request {request_id!r} is already admitted")
        prompt_len = len(prompt_token_ids)
        if prompt_len == 0:
            raise ValueError(f"request {request_id!r} has an empty prompt")
        if max_total_tokens < prompt_len:
            raise ValueError(
                f"request {request_id!r}: max_total_tokens {max_total_tokens} < prompt length {prompt_len}"
            )
        plan = self._plan_admission(prompt_token_ids, max_total_tokens, reuse)
        if not self._admissible(plan):
            self._num_refused += 1
            return None
        for block_id in plan.reused:
            self._pool.incref(block_id)
        blocks = list(plan.reused) + [self._allocate(request_id) for _ in range(plan.num_new)]
        num_reused_tokens = len(plan.reused) * self.block_size
        self._seqs[request_id] = SequenceBlocks(
            limit=plan.limit,
            blocks=blocks,
            hashes=list(plan.hashes),
            num_committed=num_reused_tokens,
            num_ensured=plan.first_extent,
        )
        self._num_admitted += 1
        if self._reuse and reuse:
            self._reuse_hit_tokens += num_reused_tokens
            self._reuse_queried_tokens += prompt_len
        self._note_usage()
        return num_reused_tokens

    def fork(self, source_id: RequestId, request_id: RequestId, num_tokens: int) -> list[tuple[int, int]] | None:
        """Admit `request_id` as a copy of `source_id`'s first `num_tokens` positions (paired decoding: a plain and a
        speculative request decoding from one prefill). Full blocks are shared (ref-counted, never written again:
        their positions are final); the partial last block, which both will append to, gets a fresh block for the
        new request. Returns the (source block, new block) pairs whose contents the caller must copy, or None when
        the policy cannot admit the copy now (nothing is changed then)."""
        if request_id in self._seqs:
            raise ValueError(f"request {request_id!r} is already admitted")
        src = self._seq(source_id)
        if not 0 < num_tokens <= src.num_committed:
            raise ValueError(f"request {source_id!r}: cannot fork {num_tokens} positions of {src.num_committed} final")
        full = num_tokens // self.block_size
        shared = src.blocks[:full]
        first_extent = min(num_tokens + self._window, src.limit)
        plan = AdmissionPlan(
            prompt_len=num_tokens,
            limit=src.limit,
            reused=list(shared),
            hashes=list(src.hashes[:full]),
            first_extent=first_extent,
            num_new=self.blocks_for(first_extent) - full,
            num_revived=0,
        )
        if not self._admissible(plan):
            self._num_refused += 1
            return None
        for block_id in shared:
            self._pool.incref(block_id)
        new = [self._allocate(request_id) for _ in range(plan.num_new)]
        self._seqs[request_id] = SequenceBlocks(
            limit=src.limit,
            blocks=list(shared) + new,
            hashes=list(plan.hashes),
            num_committed=num_tokens,
            num_ensured=first_extent,
        )
        self._num_admitted += 1
        self._note_usage()
        return [(src.blocks[full], new[0])] if num_tokens % self.block_size else []

    def ensure_capacity(self, request_id: RequestId, num_tokens: int) -> bool:
        """Make blocks cover positions [0, num_tokens). False if the pool cannot (the scheduler then
        preempts); nothing is allocated in that case."""
        seq = self._seq(request_id)
        if num_tokens > seq.limit:
            raise ValueError(
                f"request {request_id!r}: asked for {num_tokens} KV positions, beyond its limit {seq.limit} "
                f"(max_total_tokens + window_tokens - 1)"
            )
        missing = self.blocks_for(num_tokens) - len(seq.blocks)
        if missing > self._pool.num_free_blocks:
            self._num_capacity_failures += 1
            return self._on_shortage(request_id, missing)
        for _ in range(missing):
            seq.blocks.append(self._allocate(request_id))
        seq.num_ensured = max(seq.num_ensured, num_tokens)
        self._note_usage()
        return True

    def commit(self, request_id: RequestId, token_ids: Sequence[int]) -> None:
        """`token_ids` (prompt + accepted output, from position 0) now have final KV. Completed full blocks
        are published for reuse; the partial last block and anything past `token_ids` (drafts) never are."""
        seq = self._seq(request_id)
        n = len(token_ids)
        if n < seq.num_committed:
            raise ValueError(
                f"request {request_id!r}: commit of {n} tokens after {seq.num_committed} (use rewind to drop KV)"
            )
        if n > seq.num_ensured:
            raise ValueError(f"request {request_id!r}: commit of {n} tokens, only {seq.num_ensured} ensured")
        seq.num_committed = n
        if not self._reuse:
            return
        bs = self.block_size
        parent = seq.hashes[-1] if seq.hashes else None
        for i in range(len(seq.hashes), n // bs):
            h = block_hash(parent, token_ids[i * bs : (i + 1) * bs])
            # A False return (someone else published the same prefix first) is fine: the hash is still kept
            # here, because the next block's hash chains on it.
            self._pool.register(seq.blocks[i], h)
            seq.hashes.append(h)
            parent = h

    def rewind(self, request_id: RequestId, num_tokens: int) -> None:
        """KV at positions >= num_tokens is discarded (rejected drafts). Committed KV cannot be rewound: those
        blocks may already be shared, and overwriting them would corrupt other requests."""
        seq = self._seq(request_id)
        if not seq.num_committed <= num_tokens <= seq.num_ensured:
            raise ValueError(
                f"request {request_id!r}: rewind to {num_tokens} outside "
                f"[committed {seq.num_committed}, ensured {seq.num_ensured}]"
            )
        seq.num_ensured = num_tokens
        keep = self.blocks_for(num_tokens)
        if self._leaks_on_rewind is not None and len(seq.blocks) > keep and self._leaks_on_rewind():
            del seq.blocks[keep:]  # the planted bug: out of the table, never back in the pool
            return
        self._release_past(seq, num_tokens)

    def free(self, request_id: RequestId) -> None:
        """Release a finished or preempted request. Its committed full blocks stay cached for reuse."""
        seq = self._seqs.pop(request_id, None)
        if seq is None:
            raise KeyError(f"unknown request {request_id!r}")
        # Tail first: the pool evicts the least recently freed cached block first, and a chain is only useful
        # from its start, so the prefix should outlive the tail.
        for block_id in reversed(seq.blocks):
            self._pool.decref(block_id)

    def unowned_blocks(self) -> dict[int, RequestId | None]:
        """Blocks referenced more often than the live requests' block tables hold them: nothing will ever return
        them to the pool (a leak). Each maps to the request that last took it from the pool, where known. Once every
        request has finished, every block must be free or cached-free, so this must be empty."""
        held = Counter(b for seq in self._seqs.values() for b in seq.blocks)
        return {b: self._holder.get(b) for b in range(self.num_blocks) if self._pool.ref_count(b) > held[b]}

    def stats(self) -> dict[str, Any]:
        used = self.num_blocks - self.num_free_blocks
        return {
            "version": self.version,
            "num_blocks": self.num_blocks,
            "block_size": self.block_size,
            "blocks_used": used,
            "blocks_free": self.num_free_blocks,
            "blocks_cached_free": self._pool.num_cached_free_blocks,
            "blocks_reserved": self.reserved_blocks(),
            "peak_blocks_used": self._peak_used,
            "num_requests": len(self._seqs),
            "admitted": self._num_admitted,
            "admissions_refused": self._num_refused,
            "capacity_failures": self._num_capacity_failures,
            "reuse_hit_tokens": self._reuse_hit_tokens,
            "reuse_queried_tokens": self._reuse_queried_tokens,
        }

    # ----- policy hooks -----

    @abstractmethod
    def _admissible(self, plan: AdmissionPlan) -> bool:
        """Whether the policy lets this admission go ahead."""

    @abstractmethod
    def reserved_blocks(self) -> int:
        """Free blocks the policy is holding back for the live requests."""

    @abstractmethod
    def _release_past(self, seq: SequenceBlocks, num_tokens: int) -> None:
        """After a rewind to `num_tokens`: give back the blocks past it, or keep them."""

    def _on_shortage(self, request_id: RequestId, missing: int) -> bool:
        """`ensure_capacity` found too few free blocks; the default reports it to the scheduler."""
        return False

    # ----- helpers -----

    def _seq(self, request_id: RequestId) -> SequenceBlocks:
        seq = self._seqs.get(request_id)
        if seq is None:
            raise KeyError(f"unknown request {request_id!r}")
        return seq

    def _allocate(self, request_id: RequestId) -> int:
        block_id = self._pool.allocate()
        self._holder[block_id] = request_id
        return block_id

    def _live(self) -> list[SequenceBlocks]:
        return list(self._seqs.values())

    def _plan_admission(self, prompt: Sequence[int], max_total_tokens: int, reuse: bool = True) -> AdmissionPlan:
        limit = max_total_tokens + self._window - 1
        reused, hashes = self._match_prefix(prompt) if reuse else ([], [])
        first_extent = min(len(prompt) + self._window, limit)
        return AdmissionPlan(
            prompt_len=len(prompt),
            limit=limit,
            reused=reused,
            hashes=hashes,
            first_extent=first_extent,
            num_new=self.blocks_for(first_extent) - len(reused),
            num_revived=sum(1 for b in reused if self._pool.ref_count(b) == 0),
        )

    def _match_prefix(self, prompt: Sequence[int]) -> tuple[list[int], list[bytes]]:
        """Cached blocks matching the prompt's leading full blocks. Only blocks lying entirely within the
        first len(prompt) - 1 tokens count: the last prompt token must still run through the model for its
        logits."""
        if not self._reuse:
            return [], []
        bs = self.block_size
        reused: list[int] = []
        hashes: list[bytes] = []
        parent: bytes | None = None
        for i in range((len(prompt) - 1) // bs):
            h = block_hash(parent, prompt[i * bs : (i + 1) * bs])
            block_id = self._pool.peek(h)
            if block_id is None:
                break
            reused.append(block_id)
            hashes.append(h)
            parent = h
        return reused, hashes

    def _note_usage(self) -> None:
        self._peak_used = max(self._peak_used, self.num_blocks - self.num_free_blocks)
