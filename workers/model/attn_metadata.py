"""Attention metadata: built once per step from scheduler state and passed to attention explicitly.

Primary fields describe the batch (how many new tokens each request brings, how long its KV is after this
forward, where its blocks are). Everything attention needs (positions, slot mapping, the gather of cached keys,
the mask) is derived from them in `on_update()`, so a spec-dec worker can change `seq_lens` / `kv_lens`, call
`on_update()`, and later put the originals back with `restore_from_spec_dec()`. The metadata is a value: indices
and masks only; state that outlives a step (the KV pool, the decode copy) lives beside the pool (`PagedKV`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch

# The fields a spec-dec worker may save and mutate.
SPEC_DEC_FIELDS = ("seq_lens", "kv_lens", "num_contexts", "block_tables")
# Every on_update() gets a version unique in the process, so attention-side caches keyed on it (the decode copy's
# plan) can never mistake one metadata object's derived tensors for another's.
_VERSIONS = itertools.count(1)


@dataclass
class ContextView:
    """Where one context request's tokens sit in the flattened batch, and the KV slots it attends to."""

    token_start: int
    token_end: int
    key_slots: torch.Tensor  # [kv_len] slot of each key position
    mask: torch.Tensor | None  # [n, kv_len] bool; None = plain causal over a sequence that starts at 0


@dataclass
class BatchEntry:
    """One request's share of a forward: `num_new_tokens` tokens starting at KV position `start`."""

    request_id: int
    start: int
    num_new_tokens: int
    block_table: list[int]
    is_context: bool


class AttentionMetadata:
    """One instance lives as long as its executor (as in engines that keep static buffers for graph capture);
    `prepare()` rebuilds the batch fields every step but leaves spec-dec saved state alone, so state that a
    worker saved and never restored is still there at the next step, where `prepare_for_spec_dec` trips on it."""

    def __init__(self, block_size: int, device: torch.device) -> None:
        self.block_size = block_size
        self.device = device
        self.version = 0  # changes with every on_update()
        self.request_ids: list = []
        self.decoding_request_ids: list = []  # the generation requests of the batch as prepared (not as mutated)
        self.seq_lens = torch.zeros(0, dtype=torch.int64)  # [B] new tokens per request in this forward
        self.kv_lens = torch.zeros(0, dtype=torch.int64)  # [B] KV length of each request after this forward
        self.block_tables = torch.zeros(0, 1, dtype=torch.int64)  # [B, max_blocks], padded with block 0
        self.num_contexts = 0  # the first num_contexts requests are context (prefill) requests
        self._saved: dict[str, object] = {}

    def prepare(self, entries: list[BatchEntry]) -> AttentionMetadata:
        """Build this step's batch fields. Context entries must come first (as the scheduler orders them)."""
        num_contexts = sum(e.is_context for e in entries)
        if any(e.is_context for e in entries[num_contexts:]):
            raise ValueError("context requests must precede generation requests in a batch")
        width = max(1, max((len(e.block_table) for e in entries), default=1))
        tables = torch.zeros(len(entries), width, dtype=torch.int64)
        for i, e in enumerate(entries):
            tables[i, : len(e.block_table)] = torch.tensor(e.block_table, dtype=torch.int64)
        self.request_ids = [e.request_id for e in entries]
        self.decoding_request_ids = [e.request_id for e in entries if not e.is_context]
        self.seq_lens = torch.tensor([e.num_new_tokens for e in entries], dtype=torch.int64)
        self.kv_lens = torch.tensor([e.start + e.num_new_tokens for e in entries], dtype=torch.int64)
        self.block_tables = tables
        self.num_contexts = num_contexts
        self.on_update()
        return self

    @property
    def num_requests(self) -> int:
        return int(self.seq_lens.shape[0])

    @property
    def num_tokens(self) -> int:
        return int(self.seq_lens.sum())

    @property
    def num_generations(self) -> int:
        return self.num_requests - self.num_contexts

    def on_update(self) -> None:
        """Recompute every derived tensor from seq_lens, kv_lens and block_tables."""
        seq_lens, kv_lens, bs = self.seq_lens, self.kv_lens, self.block_size
        if bool((seq_lens > kv_lens).any()):
            raise ValueError(f"seq_lens {seq_lens.tolist()} exceed kv_lens {kv_lens.tolist()}")
        num_req = self.num_requests
        needed_blocks = int((kv_lens.max() + bs - 1) // bs) if num_req else 0
        if needed_blocks > self.block_tables.shape[1]:
            raise ValueError(f"kv_lens {kv_lens.tolist()} need {needed_blocks} blocks, tables hold fewer")
        query_start = torch.zeros(num_req + 1, dtype=torch.int64)
        query_start[1:] = torch.cumsum(seq_lens, 0)
        batch_index = torch.repeat_interleave(torch.arange(num_req), seq_lens)
        offset_in_seq = torch.arange(int(query_start[-1])) - query_start[batch_index]
        positions = (kv_lens - seq_lens)[batch_index] + offset_in_seq
        slot_mapping = self.block_tables[batch_index, positions // bs] * bs + positions % bs

        dev = self.device
        self.query_start = query_start.to(dev)
        self.positions = positions.to(dev)
        self.slot_mapping = slot_mapping.to(dev)
        self.last_token_index = (query_start[1:] - 1).to(dev)  # index of each request's last token
        self._build_context_views(query_start)
        self._build_generation_batch(query_start)
        self.version = next(_VERSIONS)

    def _build_context_views(self, query_start: torch.Tensor) -> None:
        """One attention call per context request over exactly its own keys: a prefill of L tokens costs
        L x kv_len, never (batch x longest prompt) as a padded batch would."""
        bs, dev = self.block_size, self.device
        views = []
        for i in range(self.num_contexts):
            n, kv = int(self.seq_lens[i]), int(self.kv_lens[i])
            key_pos = torch.arange(kv)
            slots = (self.block_tables[i, key_pos // bs] * bs + key_pos % bs).to(dev)
            mask = None
            if n != kv:  # a reused prefix or a chunk: queries start at kv - n, not at 0
                q_pos = torch.arange(kv - n, kv)
                mask = (key_pos[None, :] <= q_pos[:, None]).to(dev)
            views.append(ContextView(int(query_start[i]), int(query_start[i]) + n, slots, mask))
        self.context_views = views

    def _build_generation_batch(self, query_start: torch.Tensor) -> None:
        """Generation requests (1 + K new tokens each) as one padded batch over their gathered keys."""
        bs, dev, c = self.block_size, self.device, self.num_contexts
        seq_lens, kv_lens = self.seq_lens[c:], self.kv_lens[c:]
        num_gen = int(seq_lens.shape[0])
        self.gen_token_start = int(query_start[c])
        self.gen_max_q = int(seq_lens.max()) if num_gen else 0
        if not num_gen:
            return
        # Keys are gathered whole blocks at a time (one index per block, not per token): copying 16-token rows
        # is several times cheaper than a per-token gather, and decode is bound by this copy on CPU.
        num_blocks = int((kv_lens.max() + bs - 1) // bs)
        key_pos = torch.arange(num_blocks * bs)
        batch_index = torch.repeat_interleave(torch.arange(num_gen), seq_lens)
        offset_in_seq = torch.arange(int(seq_lens.sum())) - (query_start[c:-1] - query_start[c])[batch_index]
        row = torch.arange(self.gen_max_q)
        q_pos = (kv_lens - seq_lens)[:, None] + row[None, :]  # [G, max_q]
        mask = (key_pos[None, None, :] <= q_pos[:, :, None]) & (key_pos[None, None, :] < kv_lens[:, None, None])
        # Padding rows attend to key 0 so softmax stays finite; their outputs are never read.
        mask[:, :, 0] |= ~(row[None, :] < seq_lens[:, None])
        self.gen_key_blocks = self.block_tables[c:, :num_blocks].reshape(-1).to(dev)  # [G * num_blocks]
        self.gen_batch_index = batch_index.to(dev)
        self.gen_offset_in_seq = offset_in_seq.to(dev)
        # Additive float mask: CPU SDPA is measurably faster with it than with a boolean one.
        additive = torch.zeros(mask.shape).masked_fill_(~mask, float("-inf"))
        self.gen_num_blocks = num_blocks
        self.gen_additive_mask = additive  # [G, max_q, num_blocks * block_size], on the CPU (the decode copy's plan)
        self.gen_attn_mask = additive[:, None, :, :].to(dev)  # [G, 1, max_q, num_blocks * block_size]

    # --- spec-dec save / restore -------------------------------------------------------------------------

    @property
    def saved_fields(self) -> tuple[str, ...]:
        return tuple(self._saved)

    def prepare_for_spec_dec(self, *fields: str) -> None:
        """Save the named fields so the draft loop can mutate them; refuses to nest."""
        assert not self._saved, (
            f"spec-dec state was never restored: fields {', '.join(self._saved)} are still saved "
            f"from an earlier prepare_for_spec_dec()"
        )
        unknown = [f for f in fields if f not in SPEC_DEC_FIELDS]
        if unknown:
            raise ValueError(f"cannot save {unknown}; savable fields: {', '.join(SPEC_DEC_FIELDS)}")
        for name in fields:
            value = getattr(self, name)
            self._saved[name] = value.clone() if isinstance(value, torch.Tensor) else value

    def restore_from_spec_dec(self) -> tuple[str, ...]:
        """Put the saved fields back and rebuild the derived tensors; returns the restored field names."""
        restored = tuple(self._saved)
        for name, value in self._saved.items():
            setattr(self, name, value)
        self._saved.clear()
        if restored:
            self.on_update()
        return restored
