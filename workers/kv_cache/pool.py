"""Block pool: block ids, reference counts, a free list, and prefix reuse by chained block hashes.

Pure bookkeeping (no torch): the runner owns the KV tensor and only ever sees block ids.
"""

from __future__ import annotations

import hashlib
import struct
from collections import OrderedDict
from collections.abc import Sequence


class NoFreeBlocks(RuntimeError):
    """The pool has no free block left; managers check capacity first, so reaching this is a bug."""


def block_hash(parent: bytes | None, token_ids: Sequence[int]) -> bytes:
    """Hash of one FULL block, chained to the hash of the block before it.

    Chaining makes a hash name the whole prefix, not just this block's tokens, so two requests share a block
    only when everything before it matches too. blake2b (not Python's `hash`) keeps the value the same in
    every process and across runs, which ranks and resumed runs rely on.
    """
    h = hashlib.blake2b(digest_size=16)
    h.update(parent or b"")
    # Signed 64-bit little-endian: every tokenizer id fits, and the length is implied by the block size.
    h.update(struct.pack(f"<{len(token_ids)}q", *token_ids))
    return h.digest()


class BlockPool:
    """Fixed set of `num_blocks` blocks of `block_size` tokens each.

    A block is live (ref count > 0) or free (ref count 0, on the free list). A free block keeps its hash, so a
    later request with the same prefix can take it back (`lookup` / `incref`) until `allocate` hands it out
    for new content, which drops the hash.
    """

    def __init__(self, num_blocks: int, block_size: int) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError(f"block pool needs positive sizes: {num_blocks} blocks of {block_size} tokens")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self._ref = [0] * num_blocks
        self._hash: list[bytes | None] = [None] * num_blocks
        self._by_hash: dict[bytes, int] = {}
        # An ordered dict rather than a deque: reviving a cached block must take it out of the middle in
        # O(1). Front = next to be handed out; see `decref` for the order.
        self._free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))

    @property
    def num_free_blocks(self) -> int:
        return len(self._free)

    @property
    def num_cached_free_blocks(self) -> int:
        """Free blocks that still hold reusable content."""
        return sum(1 for b in self._free if self._hash[b] is not None)

    def ref_count(self, block_id: int) -> int:
        return self._ref[block_id]

    def hash_of(self, block_id: int) -> bytes | None:
        return self._hash[block_id]

    def allocate(self) -> int:
        """Hand out a free block for new content (ref count 1); its old hash, if any, is forgotten."""
        if not self._free:
            raise NoFreeBlocks(f"all {self.num_blocks} KV blocks are in use")
        block_id, _ = self._free.popitem(last=False)
        self._forget_hash(block_id)
        self._ref[block_id] = 1
        return block_id

    def incref(self, block_id: int) -> None:
        """Take one more reference. A free block may be taken only if it is cached (a prefix hit)."""
        if self._ref[block_id] == 0:
            if self._hash[block_id] is None:
                raise ValueError(f"block {block_id} is free and holds no cached content; allocate instead")
            del self._free[block_id]
        self._ref[block_id] += 1

    def decref(self, block_id: int) -> None:
        """Drop one reference; at zero the block goes back to the free list, keeping its hash."""
        if self._ref[block_id] <= 0:
            raise ValueError(f"block {block_id} is already free (double free)")
        self._ref[block_id] -= 1
        if self._ref[block_id] == 0:
            self._free[block_id] = None
            # Blocks with nothing to reuse go to the front, to be handed out first; cached ones to the back,
            # so the least recently freed cached block is the first one evicted.
            if self._hash[block_id] is None:
                self._free.move_to_end(block_id, last=False)

    def peek(self, h: bytes) -> int | None:
        """The block holding the content named by `h`, live or free; no side effect."""
        return self._by_hash.get(h)

    def lookup(self, h: bytes) -> int | None:
        """Like `peek`, but a hit takes a reference (and a free hit leaves the free list)."""
        block_id = self._by_hash.get(h)
        if block_id is not None:
            self.incref(block_id)
        return block_id

    def register(self, block_id: int, h: bytes) -> bool:
        """Publish a live, full, final block under `h`. Returns False if another block already holds that
        content (two requests computed the same prefix side by side): the first one stays the shared copy."""
        if self._ref[block_id] == 0:
            raise ValueError(f"block {block_id} is free; only a live block can be registered")
        old = self._hash[block_id]
        if old is not None:
            if old != h:
                raise ValueError(f"block {block_id} is already registered under another hash")
            return True
        if h in self._by_hash:
            return False
        self._hash[block_id] = h
        self._by_hash[h] = block_id
        return True

    def check(self) -> None:
        """Raise AssertionError if the internal structures disagree (for tests and debugging; not `assert`,
        so it still checks under `python -O`)."""
        problems = []
        for b in range(self.num_blocks):
            if (self._ref[b] == 0) != (b in self._free) or self._ref[b] < 0:
                problems.append(f"block {b}: ref count {self._ref[b]} disagrees with the free list")
            h = self._hash[b]
            if h is not None and self._by_hash.get(h) != b:
                problems.append(f"block {b}: its hash is not indexed")
        if len(self._by_hash) != sum(h is not None for h in self._hash):
            problems.append("hash index has stale entries")
        if problems:
            raise AssertionError("; ".join(problems))

    def _forget_hash(self, block_id: int) -> None:
        h = self._hash[block_id]
        if h is not None:
            del self._by_hash[h]
            self._hash[block_id] = None
