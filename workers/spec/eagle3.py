"""Eagle3OneModelWorker: chain drafting for the one-model engine step (the executor runs the target
forward, capturing the three layers this worker asks for, and verifies; then it calls `forward` here).

Per step:
1. save metadata; draft pass 0 over every position the target just processed (target features through `fc`, token
   ids shifted left, the new token last), writing the draft layer's KV; then K-1 single-token steps on the draft's
   own pre-norm output; restore metadata;
2. return the drafts (and q where sampled); the executor then rewinds each request's KV to what was accepted.

The worker holds the draft model's parts only (`DraftParts`): the head, the target's token embedding and shape, the
KV pool its layer writes, the TP group.
"""

from __future__ import annotations

import torch

from ..memory.budget import draft_activation_bytes
from ..sampling.keyed import target_probs
from ..sampling.rejection import sample_from
from .base import DraftBuild, DraftInput, Drafts, SpecContext, SpecWorkerBase
from .eagle3_head import Eagle3DraftModel, build_draft_model, resolve_draft_model


def _samples_drafts(item) -> bool:
    """A request whose drafts are drawn from q: sampled, speculative, verified by rejection sampling."""
    req = item.request
    return req.stream is not None and req.speculative and not req.sampling.greedy


def build_eagle3_draft(build: DraftBuild) -> Eagle3DraftModel:
    """The registry's draft builder: the head `--draft-model` names ("auto": the one that ships for the model)."""
    spec = build.spec
    head = resolve_draft_model(spec.draft_model, build.model_name)
    draft = build_draft_model(build.target, head, spec.capture_layers, spec.draft_seed, build.tp)
    return draft.to(build.dtype).to(build.device).eval()


class Eagle3OneModelWorker(SpecWorkerBase):
    def __init__(self, context: SpecContext) -> None:
        super().__init__(context)
        parts = context.drafter
        if parts is None:
            raise ValueError("the Eagle3 worker drafts with a draft model: its SpecContext names none")
        self.draft: Eagle3DraftModel = parts.model
        self.embed = parts.embed  # the target's token embedding
        self.vocab_size = parts.target.vocab_size  # the target's: q is laid out over it
        self.kv = parts.kv
        self.tp = parts.tp
        self.draft_kv_layer = parts.target.num_hidden_layers  # the extra layer after the target's
        self.capture_layers = tuple(self.draft.config.capture_layers)
        self.sampled_drafts = context.spec.sampling == "rejection-q"  # drafts drawn from q at temperature > 0

    # Hooks a test or a fault injector can wrap (the draft loop calls them by name).
    def draft_step_hook(self, index: int) -> None:
        """Called before draft step `index` (0 = the pass over all positions)."""
        self.fault_point("draft_step", index)

    def draft_kv_index(self) -> int:
        """The KV layer the draft head writes and reads: its own, after the target's."""
        return self.draft_kv_layer

    def draft_start_hidden(self, hidden: torch.Tensor, items) -> torch.Tensor:
        """Each request's hidden state its drafts start from (one row per request): its own."""
        return hidden

    def _forward_impl(self, step: DraftInput) -> Drafts | list[list[int]]:
        meta = step.meta
        meta.prepare_for_spec_dec("seq_lens", "kv_lens", "num_contexts")
        self.fault_point("prepare_for_spec_dec")
        # The draft pass allocates after the save: an OOM here is the failure this product exists to catch.
        self.need_memory(self._draft_bytes(meta.num_tokens, len(step.items)), "Eagle3 draft pass", last_of_forward=True)
        drafts = self._draft(step)
        self.fault_point("restore")
        meta.restore_from_spec_dec()
        return drafts

    def _draft_bytes(self, num_tokens: int, rows: int) -> int:
        hc = self.draft.config
        return draft_activation_bytes(
            hc.layer, hc.target_hidden_size, hc.draft_vocab_size, num_tokens, rows, self.kv.element_size, self.tp.size
        )

    def _draft(self, step: DraftInput) -> Drafts:
        meta, items, emitted, dev = step.meta, step.items, step.emitted, step.input_ids.device
        kv_layer = self.kv.layer(self.draft_kv_index())
        embed = self.embed
        starts = meta.query_start.tolist()
        ids = step.input_ids.tolist()
        num_accepted = step.num_accepted

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
        features = self.draft.fuse(step.captured)
        next_t = torch.tensor(next_ids, dtype=torch.int64, device=dev)
        out = self.draft(embed(next_t), features, meta, kv_layer)
        hidden = self.draft_start_hidden(out[torch.tensor(gather, device=dev)], items)
        sampled = self.sampled_drafts and any(_samples_drafts(it) for it in items)
        token, q = self._propose(hidden, items) if sampled else (self.draft.propose(hidden), None)
        proposals, draft_probs = [token], [q]

        # Steps 1..K-1: one token per request, on the draft's own output, one position further each time.
        if self.K > 1:
            base = torch.tensor(step.num_computed, dtype=torch.int64)
            meta.seq_lens = torch.ones(len(items), dtype=torch.int64)
            meta.num_contexts = 0
            for i in range(1, self.K):
                self.draft_step_hook(i)
                meta.kv_lens = base + i
                meta.on_update()
                hidden = self.draft(embed(token), hidden, meta, kv_layer)
                token, q = self._propose(hidden, items) if sampled else (self.draft.propose(hidden), None)
                proposals.append(token)
                draft_probs.append(q)
        probs = None
        if sampled:  # verification (rank 0, which decided the drafts below) reads q beside each draft
            probs = tuple(
                torch.stack([q[r] for q in draft_probs]) if _samples_drafts(it) else None for r, it in enumerate(items)
            )
        drafts = self.tp.broadcast(torch.stack(proposals, dim=1).contiguous())
        return Drafts(drafts.tolist(), probs)

    def _propose(self, hidden: torch.Tensor, items) -> tuple[torch.Tensor, list[torch.Tensor | None]]:
        """`--spec-sampling rejection-q`: each sampled request's draft drawn from the head's q (its logits through the
        plain sampler's temperature / top-k / top-p, over the target's vocabulary) with the request's own stream; a
        greedy request keeps the argmax. Returns the tokens and each row's q (None where greedy)."""
        logits = self.draft.draft_logits(hidden)
        draft_ids = torch.argmax(logits, dim=-1).cpu()
        q_rows: list[torch.Tensor | None] = []
        for r, item in enumerate(items):
            if not _samples_drafts(item):
                q_rows.append(None)
                continue
            q_draft = target_probs(logits[r].cpu(), item.request.sampling)
            draft_ids[r] = sample_from(q_draft, item.request.stream)
            q = torch.zeros(self.vocab_size, dtype=torch.float32)
            q[self.draft.to_target(torch.arange(len(q_draft), device=self.draft.d2t.device)).cpu()] = q_draft
            q_rows.append(q)
        # Rank 0's draws for every rank: the next draft step feeds these tokens through the TP-sharded head, whose
        # collectives need the same input on every rank (a rank's stream only matches rank 0's until it verifies)
        draft_ids = self.tp.broadcast(draft_ids.to(hidden.device).contiguous())
        return self.draft.to_target(draft_ids), q_rows
