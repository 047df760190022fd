"""One engine step on one screen: schedule, build attention metadata, run the target, sample, update requests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch

from .attn_metadata import AttentionMetadata, BatchEntry
from .kv_cache.layout import KVLayout
from .memory import MemoryBudget, forward_activation_bytes
from .model import CausalLM
from .request import Request
from .sampling import sample_tokens
from .scheduler import ScheduledBatch, Scheduler
from .spec.base import SpecStepInput, SpecWorkerBase


class FeatureTap(Protocol):
    """Receives what the target computed in a plain-decoding step (see workers/spec/train/collect.py)."""

    capture_layers: tuple[int, ...]

    def record(self, items, meta: AttentionMetadata, input_ids, hidden, captured, model: CausalLM) -> None: ...


def allocate_kv_pool(layout: KVLayout, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """One tensor for every KV layer (target layers, then room for the draft layer), sliced per layer."""
    slots = layout.num_blocks * layout.block_size
    return torch.zeros(layout.num_layers, 2, slots, layout.num_kv_heads, layout.head_dim, dtype=dtype, device=device)


class Executor:
    def __init__(
        self,
        model: CausalLM,
        kv_pool: torch.Tensor,
        scheduler: Scheduler | None,  # set per generate() call
        block_size: int,
        device: torch.device,
        on_token: Callable[[Request, int], None],
        meta: AttentionMetadata,
        spec_worker: SpecWorkerBase | None = None,
    ) -> None:
        self.model = model
        self.kv_pool = kv_pool
        self.scheduler = scheduler
        self.block_size = block_size
        self.device = device
        # Called once per new token; decides whether the request is finished (engine owns stop rules).
        self.on_token = on_token
        self.num_steps = 0
        self.spec_worker = spec_worker
        self.memory: MemoryBudget | None = None  # set by the engine
        self.meta = meta  # owned by the engine: it outlives one generate() call, as real engines' buffers do
        # Draft-head training sets this to record the target's captured layers and predictions (plain decoding).
        self.feature_tap: FeatureTap | None = None

    @torch.inference_mode()
    def step(self) -> ScheduledBatch:
        batch = self.scheduler.schedule()
        meta = self.meta.prepare(
            [BatchEntry(i.request.request_id, i.start, i.num_new_tokens, self._table(i.request), i.is_context)
             for i in batch.items]
        )  # fmt: skip
        input_ids = torch.tensor(
            [t for i in batch.items for t in self._step_tokens(i)], dtype=torch.int64, device=self.device
        )
        if self.spec_worker is not None:
            self._spec_step(batch, meta, input_ids)
            self.num_steps += 1
            return batch
        if self.memory is not None:
            cfg, tp = self.model.config, self.model.tp.size
            need = forward_activation_bytes(cfg, meta.num_tokens, meta.num_requests, self.kv_pool.element_size(), tp)
            self.memory.check(need, "target forward", last_of_forward=True)
        tap = self.feature_tap
        hidden, captured = self.model(input_ids, meta, self.kv_pool, tap.capture_layers if tap else ())
        if tap is not None:
            tap.record(batch.items, meta, input_ids, hidden, captured, self.model)
        logits = self.model.compute_logits(hidden[meta.last_token_index])
        reqs = [i.request for i in batch.items]
        tokens = sample_tokens(logits, [r.sampling for r in reqs], [r.generator for r in reqs])
        # Every TP rank must continue with the same tokens: rank 0 decides.
        tokens = self.model.tp.broadcast(tokens).tolist()
        for item, token in zip(batch.items, tokens, strict=True):
            req = item.request
            req.num_computed_tokens = item.start + item.num_new_tokens
            req.num_steps += 1
            req.output_token_ids.append(token)
            self.scheduler.kv.commit(req.request_id, req.all_token_ids[: req.num_computed_tokens])
            self.on_token(req, token)
        self.num_steps += 1
        return batch

    def _spec_step(self, batch: ScheduledBatch, meta: AttentionMetadata, input_ids: torch.Tensor) -> None:
        result = self.spec_worker.forward(SpecStepInput(meta, input_ids, batch.items, self.num_steps))
        rows = zip(
            batch.items, result.emitted, result.num_computed, result.next_drafts, result.num_accepted, strict=True
        )
        for item, emitted, computed, drafts, accepted in rows:
            req = item.request
            req.num_steps += 1
            req.num_computed_tokens = computed
            req.draft_tokens = drafts
            if accepted is not None:
                req.spec_stats.record(item.num_new_tokens - 1, accepted)
            for token in emitted:
                req.output_token_ids.append(token)
                self.on_token(req, token)
                if req.finish_reason is not None:
                    break  # tokens after a stop are never emitted, exactly as without spec-dec
            if req.finish_reason is None:
                self.scheduler.kv.commit(req.request_id, req.all_token_ids[:computed])

    @staticmethod
    def _step_tokens(item) -> list[int]:
        req = item.request
        if item.is_context:
            return req.all_token_ids[item.start : item.start + item.num_new_tokens]
        # A generation request feeds its last token, plus its draft tokens under spec-dec.
        return req.all_token_ids[item.start : item.start + 1] + req.draft_tokens[: item.num_new_tokens - 1]

    def _table(self, req: Request) -> list[int]:
        return self.scheduler.kv.block_table(req.request_id)
