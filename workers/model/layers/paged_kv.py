"""The torch side of the KV cache, handed to the model with each forward: the pool (one tensor for every KV layer,
target layers then the Eagle3 draft layer, sliced per layer) and, on CPU, the decode copy beside it. The
bookkeeping (which blocks belong to whom) is workers/kv_cache/, which never touches tensors."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...kv_cache.layout import KVLayout
from ..attn_metadata import AttentionMetadata
from .decode_copy import CopyPlan, DecodeCopy


@dataclass(frozen=True)
class LayerKV:
    """One layer's view: its slice of the pool, and where its decode copy is (if the engine keeps one)."""

    index: int
    data: torch.Tensor  # [2, num_slots, kv_heads, head_dim]
    store: PagedKV

    def copy_plan(self, meta: AttentionMetadata) -> CopyPlan | None:
        copy = self.store.decode_copy
        return copy.plan(meta) if copy is not None else None

    def copy_data(self, plan: CopyPlan, block_size: int) -> torch.Tensor:
        return self.store.decode_copy.layer(self.index, self.data, plan, block_size)


@dataclass
class PagedKV:
    pool: torch.Tensor  # [num_layers, 2, num_slots, kv_heads, head_dim]
    decode_copy: DecodeCopy | None = None

    @classmethod
    def allocate(cls, layout: KVLayout, dtype: torch.dtype, device: torch.device, decode_copy: bool) -> PagedKV:
        slots = layout.num_blocks * layout.block_size
        pool = torch.zeros(
            layout.num_layers, 2, slots, layout.num_kv_heads, layout.head_dim, dtype=dtype, device=device
        )
        # Bounded by the pool's token capacity: the copy never holds more than the live requests' KV.
        return cls(pool, DecodeCopy(max_tokens=layout.max_tokens) if decode_copy else None)

    def release(self) -> None:
        """Drop the pool and the decode copies (an engine being closed): their memory is free once no step runs."""
        self.pool = self.pool.new_empty(0)
        self.decode_copy = None

    def layer(self, index: int) -> LayerKV:
        return LayerKV(index, self.pool[index], self)

    def begin_step(self, meta: AttentionMetadata) -> None:
        if self.decode_copy is not None:
            self.decode_copy.begin_step(meta)

    def copy_blocks(self, pairs: list[tuple[int, int]], block_size: int) -> None:
        """Copy whole blocks (every layer's keys and values): source block -> destination block."""
        for src, dst in pairs:
            self.pool[:, :, dst * block_size : (dst + 1) * block_size] = self.pool[
                :, :, src * block_size : (src + 1) * block_size
            ]

    @property
    def element_size(self) -> int:
        return self.pool.element_size()
