"""Decode copy: a contiguous per-request copy of the decoding requests' keys and values, one tensor per KV layer.

Why: on CPU a decode step is bound by memory traffic. Gathering every request's paged blocks into a padded batch
each step copies the whole live cache once per layer per step (~30% of a batch-32 step with 1,000-token prompts)
before attention reads it again. With this copy, a request's KV is gathered once, when it starts decoding, and
each step appends only its new tokens; attention reads `copy[:rows, :, :keys]`, a view. The block pool stays the
truth: every write goes to the pool first, and a row is refilled from the pool whenever its owner changes.

This is attention-side state owned beside the KV pool (`PagedKV`), never part of the attention metadata, which
stays a value carrying indices. Per metadata version the copy works out a `CopyPlan` (which row each decoding
request reads, and the row-shaped mask), once, and every layer's attention reuses it. Rows belong to request ids;
each layer's tensor remembers which request filled each of its rows, so a layer that never saw a request (a
forward that stopped half-way, the draft layer, a request recomputed after preemption) fills the row from the pool
before it is read. Memory: at most `max_tokens` rows x key positions (the engine passes the pool's token
capacity); a step that would need more runs on the gather path and the copy is dropped.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..attn_metadata import AttentionMetadata

_KEY_CHUNK = 256  # key capacity grows in steps of this many positions (a multiple of any block size in use)
_ROW_CHUNK = 8


@dataclass(frozen=True)
class CopyPlan:
    """Where this metadata version's decoding requests live in the copy."""

    request_ids: list  # the generation requests, in batch order
    rows: list[int]  # the copy row of each
    num_rows: int  # rows attention reads: 1 + the highest row in use
    num_keys: int  # key positions attention reads (whole blocks)
    tables: torch.Tensor  # [G, blocks] each request's blocks, covering num_keys
    row_of_token: torch.Tensor  # [generation tokens] the row of each new token
    attn_mask: torch.Tensor  # [rows, 1, 1, max_q, num_keys] additive; unowned rows attend to key 0 only


class _LayerCopy:
    def __init__(self, kv_layer: torch.Tensor, rows: int, keys: int) -> None:
        kv_heads, head_dim = kv_layer.shape[2], kv_layer.shape[3]
        # Zeros, not empty: masked keys still enter the products, and garbage NaN times 0 is NaN.
        self.data = kv_layer.new_zeros(2, rows, kv_heads, keys, head_dim)  # [2, rows, kv_heads, keys, d]
        self.owner = [-1] * rows  # request id whose KV the row holds in this layer; -1: nobody

    def grow(self, rows: int, keys: int) -> None:
        old_rows, old_keys = self.data.shape[1], self.data.shape[3]
        if rows <= old_rows and keys <= old_keys:
            return
        rows, keys = max(rows, old_rows), max(keys, old_keys)
        data = self.data.new_zeros(2, rows, self.data.shape[2], keys, self.data.shape[4])
        data[:, :old_rows, :, :old_keys] = self.data
        self.data = data
        self.owner += [-1] * (rows - old_rows)


class DecodeCopy:
    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = max_tokens  # bound on rows x key positions, the same in every layer
        self.row_of: dict = {}  # request id -> row
        self._layers: dict[int, _LayerCopy] = {}  # by KV layer index (target layers, then the draft layer)
        self._caps = (0, 0)  # rows and key positions every layer's tensor has room for
        self._plan_version: int | None = None  # metadata versions are unique in the process
        self._plan: CopyPlan | None = None

    def begin_step(self, meta: AttentionMetadata) -> None:
        """Called once per engine step, after the batch's metadata is built: rows of requests that are not decoding
        in this step (finished, preempted, or back in prefill, where their KV is recomputed into other blocks) are
        freed, so no row ever outlives the pool content it mirrors."""
        self.keep_only(set(meta.decoding_request_ids))

    def plan(self, meta: AttentionMetadata) -> CopyPlan | None:
        """The plan of this metadata version (worked out once, then reused by every layer), or None: the
        generation batch is empty, or the copy would exceed its bound (the gather path serves the step)."""
        if meta.version != self._plan_version:
            self._plan_version, self._plan = meta.version, self._make_plan(meta)
        return self._plan

    def _make_plan(self, meta: AttentionMetadata) -> CopyPlan | None:
        if not meta.gen_max_q:
            return None
        c, bs = meta.num_contexts, meta.block_size
        num_keys = meta.gen_num_blocks * bs
        request_ids = meta.request_ids[c:]
        rows = self.assign(request_ids, num_keys)
        if rows is None:
            return None
        row_index = torch.tensor(rows, dtype=torch.int64)
        additive = meta.gen_additive_mask  # [G, max_q, num_keys]
        num_rows = max(rows) + 1
        mask = torch.full((num_rows, *additive.shape[1:]), float("-inf"))
        mask[:, :, 0] = 0.0
        mask[row_index] = additive
        dev = meta.device
        return CopyPlan(
            request_ids=request_ids,
            rows=rows,
            num_rows=num_rows,
            num_keys=num_keys,
            tables=meta.block_tables[c:, : meta.gen_num_blocks].to(dev),
            row_of_token=row_index[meta.gen_batch_index.cpu()].to(dev),
            attn_mask=mask[:, None, None].to(dev),
        )

    def keep_only(self, request_ids: set) -> None:
        """Free the rows of requests that are not decoding any more (finished, preempted, or back in prefill)."""
        for rid in [r for r in self.row_of if r not in request_ids]:
            self._release(self.row_of.pop(rid))

    def assign(self, request_ids: list, num_keys: int) -> list[int] | None:
        """Rows for this step's decoding requests, or None (gather path) when the copy would exceed its bound."""
        used = set(self.row_of.values())
        free = (r for r in range(len(used) + len(request_ids)) if r not in used)
        for rid in request_ids:
            if rid not in self.row_of:
                self.row_of[rid] = next(free)
        rows = [self.row_of[rid] for rid in request_ids]
        need = self._capacity(max(rows) + 1 if rows else 0, num_keys)
        caps = (max(need[0], self._caps[0]), max(need[1], self._caps[1]))
        if caps[0] * caps[1] > self.max_tokens:
            self.drop()
            return None
        self._caps = caps
        return rows

    def drop(self) -> None:
        """Forget everything (memory goes back); the next step refills rows from the pool."""
        self.row_of.clear()
        self._layers.clear()
        self._caps = (0, 0)

    def layer(self, index: int, kv_layer: torch.Tensor, plan: CopyPlan, block_size: int) -> torch.Tensor:
        """Layer `index`'s copy, with every row of the plan filled from the pool. Call after this step's tokens are
        in the pool."""
        copy = self._layers.get(index)
        if copy is None:
            copy = self._layers[index] = _LayerCopy(kv_layer, *self._caps)
        copy.grow(*self._caps)
        pairs = list(zip(plan.request_ids, plan.rows, strict=True))
        stale = [i for i, (rid, row) in enumerate(pairs) if copy.owner[row] != rid]
        if stale:
            kv_heads, head_dim = kv_layer.shape[2], kv_layer.shape[3]
            blocks = kv_layer.view(2, -1, block_size, kv_heads, head_dim)
            which = torch.tensor(stale, device=plan.tables.device)
            picked = blocks.index_select(1, plan.tables.index_select(0, which).reshape(-1))
            picked = picked.view(2, len(stale), -1, kv_heads, head_dim).transpose(2, 3)  # [2, S, kv_heads, keys, d]
            stale_rows = torch.tensor([plan.rows[i] for i in stale], device=plan.tables.device)
            copy.data[:, stale_rows, :, : picked.shape[3]] = picked
            for i in stale:
                copy.owner[plan.rows[i]] = plan.request_ids[i]
        return copy.data

    def _release(self, row: int) -> None:
        for copy in self._layers.values():
            if row < len(copy.owner):
                copy.owner[row] = -1

    @staticmethod
    def _capacity(rows: int, keys: int) -> tuple[int, int]:
        return -(-rows // _ROW_CHUNK) * _ROW_CHUNK, -(-keys // _KEY_CHUNK) * _KEY_CHUNK
