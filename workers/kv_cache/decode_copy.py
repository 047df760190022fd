"""Decode copy: a contiguous per-request copy of the decoding requests' keys and values, one tensor per KV layer.

Why: on CPU a decode step is bound by memory traffic. Gathering every request's paged blocks into a padded batch
each step copies the whole live cache once per layer per step (~30% of a batch-32 step with 1,000-token prompts)
before attention reads it again. With this copy, a request's KV is gathered once, when it starts decoding, and
each step appends only its new tokens; attention reads `copy[:rows, :, :keys]`, a view. The block pool stays the
truth: every write goes to the pool first, and a row is refilled from the pool whenever its owner changes.

Rows belong to request ids. Each layer's tensor remembers which request filled each of its rows, so a layer that
never saw a request (a forward that stopped half-way, the draft layer, a request recomputed after preemption)
fills the row from the pool before it is read. Memory: at most `max_tokens` rows x key positions (the engine
passes the pool's token capacity); a step that would need more runs on the gather path and the copy is dropped.
"""

from __future__ import annotations

import torch

_KEY_CHUNK = 256  # key capacity grows in steps of this many positions (a multiple of any block size in use)
_ROW_CHUNK = 8


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
        self.row_of: dict[int, int] = {}  # request id -> row
        self._layers: dict[int, _LayerCopy] = {}  # keyed by the KV layer's storage address
        self.num_rows = 0  # rows this step reads: 1 + the highest row in use
        self.num_keys = 0  # key positions this step reads (whole blocks)
        self._caps = (0, 0)  # rows and key positions every layer's tensor has room for

    def keep_only(self, request_ids: set[int]) -> None:
        """Free the rows of requests that are not decoding any more (finished, preempted, or back in prefill)."""
        for rid in [r for r in self.row_of if r not in request_ids]:
            self._release(self.row_of.pop(rid))

    def assign(self, request_ids: list[int], num_keys: int) -> list[int] | None:
        """Rows for this step's decoding requests, or None (gather path) when the copy would exceed its bound."""
        used = set(self.row_of.values())
        free = (r for r in range(len(used) + len(request_ids)) if r not in used)
        for rid in request_ids:
            if rid not in self.row_of:
                self.row_of[rid] = next(free)
        rows = [self.row_of[rid] for rid in request_ids]
        self.num_rows = max(rows) + 1 if rows else 0
        self.num_keys = num_keys
        need = self._capacity(self.num_rows, num_keys)
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
        self.num_rows = self.num_keys = 0
        self._caps = (0, 0)

    def layer(
        self, kv_layer: torch.Tensor, request_ids: list[int], rows: list[int], tables: torch.Tensor, block_size: int
    ) -> torch.Tensor:
        """This layer's copy, with every row of `request_ids` filled from the pool (tables: [G, blocks] of each
        request's blocks, covering `num_keys`). Call after this step's tokens are in the pool."""
        key = kv_layer.data_ptr()
        copy = self._layers.get(key)
        if copy is None:
            copy = self._layers[key] = _LayerCopy(kv_layer, *self._caps)
        copy.grow(*self._caps)
        stale = [i for i, (rid, row) in enumerate(zip(request_ids, rows, strict=True)) if copy.owner[row] != rid]
        if stale:
            kv_heads, head_dim = kv_layer.shape[2], kv_layer.shape[3]
            blocks = kv_layer.view(2, -1, block_size, kv_heads, head_dim)
            which = torch.tensor(stale, device=tables.device)
            picked = blocks.index_select(1, tables.index_select(0, which).reshape(-1))
            picked = picked.view(2, len(stale), -1, kv_heads, head_dim).transpose(2, 3)  # [2, S, kv_heads, keys, d]
            stale_rows = torch.tensor([rows[i] for i in stale], device=tables.device)
            copy.data[:, stale_rows, :, : picked.shape[3]] = picked
            for i in stale:
                copy.owner[rows[i]] = request_ids[i]
        return copy.data

    def _release(self, row: int) -> None:
        for copy in self._layers.values():
            if row < len(copy.owner):
                copy.owner[row] = -1

    @staticmethod
    def _capacity(rows: int, keys: int) -> tuple[int, int]:
        return -(-rows // _ROW_CHUNK) * _ROW_CHUNK, -(-keys // _KEY_CHUNK) * _KEY_CHUNK
