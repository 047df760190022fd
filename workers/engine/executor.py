"""One engine step, plain or speculative, top to bottom in `Executor.step`:

schedule -> attention metadata -> target forward (capturing what the spec worker needs) -> verify (plain decoding
is the K = 0 case of the same pure function) -> optional draft (the spec worker's exception-safe template returns
the drafts; the executor then rewinds the KV the target wrote for rejected drafts) -> one commit loop (tokens, the
next drafts and their q, the KV cache's record of what is final) -> retire. Only environmental fault points are
called here (`target_forward`, half-way through the target's layers; the draft loop has its own); a planted bug is a
substitute target, verifier or proposer the engine chose when it was built. A forward that raises while serving
fails only its batch: each request is recomputed (bounded by max_retries) or fails with finish reason "error", both
recorded as events.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from ..events import EventLog
from ..faults import FaultInjector
from ..memory.budget import MemoryBudget, forward_activation_bytes
from ..model.attn_metadata import AttentionMetadata, BatchEntry
from ..model.causal_lm import CausalLM
from ..model.layers.paged_kv import PagedKV
from ..sampling.keyed import step_logprobs
from ..sampling.verify import Verifier
from ..spec.base import DraftInput, Drafts, SpecWorkerBase
from ..spec.metrics import AcceptanceStats
from .request import Request
from .scheduler import ScheduledBatch, ScheduledRequest, Scheduler
from .stopping import StopRules


class FeatureTap(Protocol):
    """Receives what the target computed in a plain-decoding step (draft-head training records it)."""

    capture_layers: tuple[int, ...]

    def record(self, items, meta: AttentionMetadata, input_ids, hidden, captured, model: CausalLM) -> None: ...


class VerifyTap(Protocol):
    """Receives what verification reads in every step: the scheduled requests (their drafts) and the logits rows laid
    out as the verifier reads them (the sampled gate's power simulation records them)."""

    def record(self, items, logits) -> None: ...


@dataclass
class StepOutput:
    """What one step did: the tokens each request got, and the requests that finished in it."""

    new_tokens: dict[int, list[int]]  # request id -> tokens appended this step
    finished: list[Request]  # finished normally, or failed for good after a forward raised
    failed: bool = False  # the forward raised (its requests were requeued or failed)


@dataclass(frozen=True)
class ExecutorParts:
    """What the engine step runs on, built once by the engine: the model (scoring passes forward it as it is), the KV
    pool, the scheduler (and through it the KV-cache manager), the attention metadata owned for the engine's life,
    the stop rules, the memory budget, the event log and fault injector, and the three parts a planted bug may
    substitute: the target the step forwards (the model unless a planted wrapper), the verifier and the proposer
    (the spec worker, None for plain decoding)."""

    model: CausalLM
    kv: PagedKV
    scheduler: Scheduler
    meta: AttentionMetadata
    stop: StopRules
    memory: MemoryBudget
    events: EventLog
    faults: FaultInjector | None = None
    max_retries: int = 2
    target: Any = None  # None: the model
    verifier: Verifier | None = None  # None: the clean one
    proposer: SpecWorkerBase | None = None


class Executor:
    def __init__(self, parts: ExecutorParts) -> None:
        self.model = parts.model
        self.target = parts.target if parts.target is not None else parts.model
        self.verifier = parts.verifier if parts.verifier is not None else Verifier()
        self.kv = parts.kv
        self.scheduler = parts.scheduler
        self.meta = parts.meta  # owned for the engine's life, as real engines keep their buffers
        self.stop = parts.stop
        self.memory = parts.memory
        self.events = parts.events
        self.faults = parts.faults
        self.spec = parts.proposer
        self.max_retries = parts.max_retries
        # every draft cycle verified over the engine's life, warmup excluded
        self.acceptance = AcceptanceStats(self.spec.K) if self.spec is not None else None
        self.num_steps = 0  # engine steps so far, warmup included (fault schedules count them)
        self.feature_tap: FeatureTap | None = None  # draft-head training records plain steps (see `tap`)
        self.verify_tap: VerifyTap | None = None  # records what verification reads (see `tap_verify`)

    @contextlib.contextmanager
    def tap(self, recorder: FeatureTap) -> Iterator[None]:
        """Record what the target computes in every step of the block (draft-head training)."""
        self.feature_tap = recorder
        try:
            yield
        finally:
            self.feature_tap = None

    @contextlib.contextmanager
    def tap_verify(self, recorder: VerifyTap) -> Iterator[None]:
        """Record what verification reads in every step of the block."""
        self.verify_tap = recorder
        try:
            yield
        finally:
            self.verify_tap = None

    @torch.inference_mode()
    def step(self, recover: bool = True) -> StepOutput:
        """Run one step. recover=False (the general warmup) lets a failed forward raise to the caller."""
        batch = self.scheduler.schedule()
        if not batch.items:
            return StepOutput({}, [])
        try:
            emitted, drafts, logprobs = self._forward(batch, self.num_steps)
        except Exception as exc:
            if not recover:
                raise
            return StepOutput({}, self._recover(batch, exc), failed=True)
        new_tokens = self._commit(batch, emitted, drafts, logprobs)
        self.num_steps += 1
        return StepOutput(new_tokens, self.scheduler.retire_finished())

    def _forward(self, batch: ScheduledBatch, step: int):
        """The step's computation: target forward, verification, and the optional draft. Returns the emitted
        tokens of each request (accepted drafts plus the target's token), the next drafts, and the emitted tokens'
        log-probabilities where a request asked for them (else None)."""
        meta = self.meta.prepare([_entry(i, self.scheduler) for i in batch.items])
        self.kv.begin_step(meta)
        input_ids = torch.tensor(
            [t for i in batch.items for t in _step_tokens(i)], dtype=torch.int64, device=meta.device
        )
        rows = _verify_rows(batch, meta)
        cfg, tp = self.model.config, self.model.tp.size
        need = forward_activation_bytes(cfg, meta.num_tokens, len(rows), self.kv.element_size, tp)
        self.memory.check(need, "target forward", step, last_of_forward=self.spec is None)
        hidden, captured = self.target(
            input_ids, meta, self.kv, self._capture_layers(), halfway=lambda: self._fault("target_forward", step)
        )
        if self.feature_tap is not None:
            self.feature_tap.record(batch.items, meta, input_ids, hidden, captured, self.model)
        logits = self.target.compute_logits(hidden[rows])
        if self.verify_tap is not None:
            self.verify_tap.record(batch.items, logits)
        emitted = self.verifier(batch.items, logits, self.model.tp, step)  # rank 0 decides, every rank receives
        wanted = any(i.request.sampling.logprobs is not None for i in batch.items)
        logprobs = step_logprobs(batch.items, logits, emitted) if wanted and self.model.tp.is_leader else None
        if self.spec is None:
            return emitted, None, logprobs
        drafting = DraftInput(meta, input_ids, batch.items, captured, emitted, step, lambda: self._rewind(drafting))
        drafts = self.spec.forward(drafting)
        self._rewind(drafting)  # had drafting raised, the worker's template would have called `rewind`
        return emitted, drafts, logprobs

    def _rewind(self, step: DraftInput) -> list[int]:
        """Discard each request's KV past what this step made final (the target's KV of rejected drafts, the draft
        layer's of its proposals). Returns the requests rewound."""
        kv_manager = self.scheduler.kv
        done = []
        for item, num_tokens in zip(step.items, step.num_computed, strict=True):
            request_id = item.request.request_id
            if kv_manager.has(request_id):
                kv_manager.rewind(request_id, num_tokens)
                done.append(request_id)
        return done

    def _commit(self, batch: ScheduledBatch, emitted, drafts: Drafts | None, logprobs=None) -> dict[int, list[int]]:
        """One commit loop for plain and speculative steps: progress, acceptance, tokens with the stop rules
        (tokens after a stop are never emitted), the next drafts (and their q), and the KV cache's record of what is
        final."""
        new_tokens: dict[int, list[int]] = {}
        for r, (item, tokens) in enumerate(zip(batch.items, emitted, strict=True)):
            req = item.request
            accepted = None if item.is_context else len(tokens) - 1
            computed = item.start + item.num_new_tokens if item.is_context else item.start + 1 + accepted
            req.num_steps += 1
            req.num_computed_tokens = computed
            req.draft_tokens = drafts.tokens[r] if drafts is not None and req.speculative else []
            if drafts is not None and drafts.probs is not None:
                req.draft_probs = drafts.probs[r]  # verification reads q beside each sampled draft
            if accepted is not None and req.spec_stats is not None:
                req.spec_stats.record(item.num_new_tokens - 1, accepted)
                if self.acceptance is not None and not req.is_warmup:
                    self.acceptance.record(item.num_new_tokens - 1, accepted)
            kept = self.stop.append(req, tokens)
            if logprobs is not None and logprobs[r] is not None:
                req.output_logprobs.extend(logprobs[r][: len(kept)])
            new_tokens[req.request_id] = kept
            final = min(computed, req.num_tokens)
            self.scheduler.kv.commit(req.request_id, req.all_token_ids[:final])
            if item.is_context and req.twin is not None:
                self._fork_twin(req, new_tokens)
        return new_tokens

    def _fork_twin(self, req: Request, new_tokens: dict[int, list[int]]) -> None:
        """Paired decoding: the plain twin starts from this prefill (its KV, and its first token)."""
        forked = self.scheduler.fork(req)
        if forked is not None:
            twin, copies = forked
            self.kv.copy_blocks(copies, self.meta.block_size)
        if not req.twin.parked:
            new_tokens[req.twin.request_id] = list(req.twin.output_token_ids)

    def _recover(self, batch: ScheduledBatch, exc: Exception) -> list[Request]:
        """Requeue the batch's requests, or fail those out of retries (returned)."""
        failed = []
        error = f"{type(exc).__name__}: {exc}"
        step = self.num_steps
        self.num_steps += 1  # the failed step counts, so a fault due "@STEP" does not fire forever
        self.events.emit(
            "forward_error", error=error, request_ids=[i.request.request_id for i in batch.items], step=step
        )
        for item in batch.items:
            req = item.request
            if req.is_finished:
                continue
            req.num_retries += 1
            if req.num_retries <= self.max_retries:
                self.scheduler.requeue(req)
                self.events.emit("request_retried", request_id=req.request_id, attempt=req.num_retries, reason=error)
            else:
                self.scheduler.fail(req, error)
                self.events.emit("request_failed", request_id=req.request_id, reason=error, retries=req.num_retries - 1)
                failed.append(req)
        return failed

    def _capture_layers(self) -> tuple[int, ...]:
        if self.spec is not None:
            return self.spec.capture_layers
        return self.feature_tap.capture_layers if self.feature_tap is not None else ()

    def _fault(self, point: str, step: int) -> None:
        if self.faults is not None:
            self.faults.check(point, step)


def _entry(item: ScheduledRequest, scheduler: Scheduler) -> BatchEntry:
    req = item.request
    table = scheduler.kv.block_table(req.request_id)
    return BatchEntry(req.request_id, item.start, item.num_new_tokens, table, item.is_context)


def _step_tokens(item: ScheduledRequest) -> list[int]:
    req = item.request
    if item.is_context:
        return req.all_token_ids[item.start : item.start + item.num_new_tokens]
    # A generation request feeds its last token, plus its draft tokens under spec-dec.
    return req.all_token_ids[item.start : item.start + 1] + req.draft_tokens[: item.num_new_tokens - 1]


def _verify_rows(batch: ScheduledBatch, meta: AttentionMetadata) -> list[int]:
    """Rows whose logits are needed: a context request's last token; every token of a generation request (its
    last token and its K drafts; K = 0 without spec-dec)."""
    starts = meta.query_start.tolist()
    rows: list[int] = []
    for r, item in enumerate(batch.items):
        rows.extend([starts[r + 1] - 1] if item.is_context else range(starts[r], starts[r + 1]))
    return rows
