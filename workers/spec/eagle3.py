"""Eagle3OneModelWorker: target forward, verify, and chain drafting in one step.

Per step (DESIGN.md "The engine", shared/reference/eagle3.md §5-7):
1. target forward over contexts and [last, d_1..d_K] per generation request, capturing three layers;
2. verify on TP rank 0 (greedy or rejection sampling), broadcast to every rank;
3. save metadata; draft pass 0 over every position just processed (target features through `fc`, token ids
   shifted left, the new token last), writing the draft layer's KV; then K-1 single-token steps on the draft's
   own pre-norm output; restore metadata;
4. rewind each request's KV to what was accepted.
"""

from __future__ import annotations

import torch

from ..config import SpecConfig
from ..events import EventLog
from ..faults import FaultInjector
from ..kv_cache.manager import KVCacheManager
from ..memory import draft_activation_bytes, forward_activation_bytes
from ..model import CausalLM
from ..parallel import TPGroup
from .base import SpecStepInput, SpecStepResult, SpecWorkerBase
from .eagle3_head import Eagle3DraftModel
from .verify import verify


class Eagle3OneModelWorker(SpecWorkerBase):
    def __init__(
        self,
        target: CausalLM,
        draft: Eagle3DraftModel,
        kv_pool: torch.Tensor,
        kv_manager: KVCacheManager,
        spec: SpecConfig,
        events: EventLog,
        tp: TPGroup,
        faults: FaultInjector | None = None,
    ) -> None:
        super().__init__(kv_manager, events, spec.guard, faults)
        self.target = target
        self.draft = draft
        self.kv_pool = kv_pool
        self.K = spec.max_draft_len
        self.tp = tp
        self.draft_kv_layer = target.config.num_hidden_layers  # the extra layer after the target's
        self.capture_layers = tuple(draft.config.capture_layers)

    # Hooks a test or a fault injector can wrap (the draft loop calls them by name).
    def draft_step_hook(self, index: int) -> None:
        """Called before draft step `index` (0 = the pass over all positions)."""
        self.fault_point("draft_step", index)

    def _forward_impl(self, step: SpecStepInput) -> SpecStepResult:
        meta, items = step.meta, step.items
        num_tokens, num_rows = meta.num_tokens, meta.num_contexts + meta.num_generations * (self.K + 1)
        self.need_memory(self._target_bytes(num_tokens, num_rows), "target forward")
        hidden, captured = self.target(step.input_ids, meta, self.kv_pool, self.capture_layers)
        starts = meta.query_start.tolist()
        rows: list[int] = []
        for r, item in enumerate(items):
            rows.extend([starts[r + 1] - 1] if item.is_context else range(starts[r], starts[r + 1]))
        logits = self.target.compute_logits(hidden[rows])

        emitted = self._verify(items, logits)
        if self.faults is not None and self.faults.wants("emit_rejected_draft"):
            emitted = self._emit_rejected_draft(items, emitted)
        num_accepted = [None if it.is_context else len(e) - 1 for it, e in zip(items, emitted, strict=True)]
        num_computed = [
            it.start + it.num_new_tokens if it.is_context else it.start + 1 + n
            for it, n in zip(items, num_accepted, strict=True)
        ]
        for it, n in zip(items, num_computed, strict=True):
            self.schedule_rewind(it.request.request_id, n)

        meta.prepare_for_spec_dec("seq_lens", "kv_lens", "num_contexts")
        self.fault_point("prepare_for_spec_dec")
        # The draft pass allocates after the save: an OOM here is the failure this product exists to catch.
        self.need_memory(self._draft_bytes(num_tokens, len(items)), "Eagle3 draft pass", last_of_forward=True)
        drafts = self._draft(step, captured, emitted, num_accepted, num_computed)
        self.fault_point("restore")
        meta.restore_from_spec_dec()
        self.apply_rewinds()
        return SpecStepResult(emitted, num_computed, drafts, num_accepted)

    def _emit_rejected_draft(self, items, emitted: list[list[int]]) -> list[list[int]]:
        """The deliberate bug of the `emit_rejected_draft` fault: the first request whose first draft was rejected
        gets that draft token instead of the target's (same count of tokens, so the KV bookkeeping still holds)."""
        for r, item in enumerate(items):
            drafts = item.request.draft_tokens
            if item.is_context or not drafts or len(emitted[r]) != 1 or emitted[r][0] == drafts[0]:
                continue
            if self.faults.due("emit_rejected_draft", self.step):
                emitted = [list(e) for e in emitted]
                emitted[r] = [drafts[0]]
            break
        return emitted

    def _target_bytes(self, num_tokens: int, rows: int) -> int:
        dtype_bytes = self.kv_pool.element_size()
        return forward_activation_bytes(self.target.config, num_tokens, rows, dtype_bytes, self.tp.size)

    def _draft_bytes(self, num_tokens: int, rows: int) -> int:
        hc = self.draft.config
        dtype_bytes = self.kv_pool.element_size()
        return draft_activation_bytes(
            hc.layer, hc.target_hidden_size, hc.draft_vocab_size, num_tokens, rows, dtype_bytes, self.tp.size
        )

    def _verify(self, items, logits: torch.Tensor) -> list[list[int]]:
        """Rank 0 decides; every rank receives the same emitted tokens (never decide per rank under TP)."""
        k = self.K
        packed = torch.full((len(items), k + 2), -1, dtype=torch.int64, device=logits.device)
        if self.tp.is_leader:
            row = 0
            for r, item in enumerate(items):
                req = item.request
                n_rows = 1 if item.is_context else k + 1
                drafts = [] if item.is_context else req.draft_tokens
                out = verify(logits[row : row + n_rows], drafts, req.sampling, req.generator)
                packed[r, 0] = len(out)
                packed[r, 1 : 1 + len(out)] = torch.tensor(out)
                row += n_rows
        packed = self.tp.broadcast(packed).tolist()
        return [p[1 : 1 + p[0]] for p in packed]

    def _draft(self, step: SpecStepInput, captured, emitted, num_accepted, num_computed) -> list[list[int]]:
        meta, items, dev = step.meta, step.items, step.input_ids.device
        kv_layer = self.kv_pool[self.draft_kv_layer]
        embed = self.target.model.embed_tokens
        starts = meta.query_start.tolist()
        ids = step.input_ids.tolist()

        # Pass 0: row p reads (target features at p, embedding of the token at p + 1).
        next_ids: list[int] = []
        gather: list[int] = []
        for r, item in enumerate(items):
            own = ids[starts[r] : starts[r + 1]]
            if item.is_context:
                nxt = own[1:] + [emitted[r][0]]
                gather.append(starts[r + 1] - 1)
            else:
                e = emitted[r]
                nxt = e + [e[-1]] * (len(own) - len(e))  # rows past the accepted ones are discarded
                gather.append(starts[r] + num_accepted[r])
            next_ids.extend(nxt)
        self.draft_step_hook(0)
        features = self.draft.fuse(captured)
        next_t = torch.tensor(next_ids, dtype=torch.int64, device=dev)
        out = self.draft(embed(next_t), features, meta, kv_layer)
        hidden = out[torch.tensor(gather, device=dev)]
        token = self.draft.propose(hidden)
        proposals = [token]

        # Steps 1..K-1: one token per request, on the draft's own output, one position further each time.
        if self.K > 1:
            base = torch.tensor(num_computed, dtype=torch.int64)
            meta.seq_lens = torch.ones(len(items), dtype=torch.int64)
            meta.num_contexts = 0
            for i in range(1, self.K):
                self.draft_step_hook(i)
                meta.kv_lens = base + i
                meta.on_update()
                hidden = self.draft(embed(token), hidden, meta, kv_layer)
                token = self.draft.propose(hidden)
                proposals.append(token)
        drafts = self.tp.broadcast(torch.stack(proposals, dim=1).contiguous())
        return drafts.tolist()
