"""Who runs this step. Continuous batching: running requests decode every step; waiting requests are admitted
as context requests while the batch size, the per-step token budget and the KV cache allow. Hands the executor
requests and token counts, never tensors."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from ..kv_cache.manager import KVCacheManager
from .request import Request, RequestStatus


@dataclass
class ScheduledRequest:
    request: Request
    start: int  # first KV position this step writes
    num_new_tokens: int
    is_context: bool


@dataclass
class ScheduledBatch:
    items: list[ScheduledRequest]  # context requests first

    @property
    def num_contexts(self) -> int:
        return sum(i.is_context for i in self.items)

    @property
    def num_tokens(self) -> int:
        return sum(i.num_new_tokens for i in self.items)


class Scheduler:
    def __init__(
        self,
        kv: KVCacheManager,
        *,
        max_batch_size: int,
        max_num_tokens: int,
        tokens_per_generation: int = 1,
        kv_lookahead: int = 0,
    ) -> None:
        self.kv = kv
        self.max_batch_size = max_batch_size
        self.max_num_tokens = max_num_tokens
        # 1 without spec-dec; 1 + max_draft_len when each generation request carries draft tokens.
        self.tokens_per_generation = tokens_per_generation
        # KV positions past a step's tokens that the same step may write (the K-1 later draft steps).
        self.kv_lookahead = kv_lookahead
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.num_preemptions = 0

    def add(self, request: Request) -> None:
        self.waiting.append(request)

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def tokens_for(self, req: Request) -> int:
        """Tokens a generation request feeds per step: its last token, plus K drafts when it speculates."""
        return self.tokens_per_generation if req.speculative else 1

    def schedule(self) -> ScheduledBatch:
        generations = self._schedule_generations()
        budget = self.max_num_tokens - sum(i.num_new_tokens for i in generations)
        contexts = self._admit(budget, num_running=len(generations))
        batch = ScheduledBatch(contexts + generations)
        if not batch.items and self.waiting:
            head = self.waiting[0]
            raise RuntimeError(
                f"request {head.request_id} ({head.num_tokens} tokens) cannot be admitted even with an empty "
                f"batch: KV cache has {self.kv.num_free_blocks} free blocks of {self.kv.block_size} tokens"
            )
        return batch

    def _schedule_generations(self) -> list[ScheduledRequest]:
        items: list[ScheduledRequest] = []
        i = 0
        while i < len(self.running):
            req = self.running[i]
            # Never past the request's own limit: drafts beyond its last token are never needed.
            limit = req.max_total_tokens + self.tokens_per_generation - 1
            tokens = self.tokens_for(req)
            needed = min(req.num_computed_tokens + tokens + self.kv_lookahead, limit)
            if self.kv.ensure_capacity(req.request_id, needed):
                items.append(ScheduledRequest(req, req.num_computed_tokens, tokens, False))
                i += 1
                continue
            # Out of blocks (on-demand policies): give back the newest request's blocks and recompute it later.
            # The victim is the last running request, never one already in `items`; a pair goes out together
            # when its twin is not scheduled yet, so that both come back (and finish) side by side.
            victim = self.running.pop()
            twin = victim.twin
            if twin is not None and twin in self.running and self.running.index(twin) > i:
                self.running.remove(twin)
                self._preempt(twin)
            self._preempt(victim)
        return items

    def _preempt(self, req: Request) -> None:
        req.num_preemptions += 1
        self.num_preemptions += 1
        self.requeue(req)

    def requeue(self, req: Request) -> None:
        """Give back the request's KV and recompute it (prompt and output so far) when it is admitted again."""
        if req in self.running:
            self.running.remove(req)
        if self.kv.has(req.request_id):
            self.kv.free(req.request_id)
        req.status = RequestStatus.WAITING
        req.num_computed_tokens = 0
        req.draft_tokens = []
        self.waiting.appendleft(req)

    def fail(self, req: Request, reason: str) -> None:
        """The request cannot be completed: it ends with finish reason "error", never as a normal answer."""
        if req in self.running:
            self.running.remove(req)
        if self.kv.has(req.request_id):
            self.kv.free(req.request_id)
        req.status = RequestStatus.FINISHED
        req.finish_reason = "error"
        req.error = reason

    def _admit(self, budget: int, num_running: int) -> list[ScheduledRequest]:
        items: list[ScheduledRequest] = []
        while self.waiting and num_running + len(items) < self.max_batch_size:
            req = self.waiting[0]
            # After a preemption the earlier output is recomputed as part of the context.
            tokens = req.all_token_ids
            if len(tokens) > budget:
                break
            cached = self.kv.admit(req.request_id, tokens, req.max_total_tokens)
            if cached is None:
                break
            if not self.kv.ensure_capacity(req.request_id, len(tokens)):
                self.kv.free(req.request_id)
                break
            self.waiting.popleft()
            req.status = RequestStatus.RUNNING
            req.num_cached_tokens = cached
            req.num_computed_tokens = cached
            self.running.append(req)
            items.append(ScheduledRequest(req, cached, len(tokens) - cached, True))
            budget -= len(tokens) - cached
        return items

    def finish(self, req: Request, reason: str) -> None:
        req.status = RequestStatus.FINISHED
        req.finish_reason = reason
        self.running.remove(req)
        self.kv.free(req.request_id)

    def fork(self, req: Request) -> tuple[Request, list[tuple[int, int]]] | None:
        """Release the parked plain twin of `req` once its prefill is done: it starts from the same prompt KV and
        first token. Returns (twin, blocks to copy) when it joined the running batch; None when it finished with
        the first token or waits for room (then it recomputes its context like a preempted request)."""
        twin = req.twin
        if twin is None or not twin.parked:
            return None
        twin.parked = False
        twin.output_token_ids = list(req.output_token_ids)
        twin.output_logprobs = list(req.output_logprobs)
        twin.first_token_time, twin.num_steps = req.first_token_time, req.num_steps
        if req.finish_reason is not None:  # the first token already ended both
            twin.finish_reason, twin.finish_time = req.finish_reason, req.finish_time
            twin.status = RequestStatus.FINISHED
            return None
        copies = self.kv.fork(req.request_id, twin.request_id, req.num_computed_tokens)
        if copies is None:
            self.waiting.appendleft(twin)
            return None
        twin.status = RequestStatus.RUNNING
        twin.num_computed_tokens = req.num_computed_tokens
        twin.num_cached_tokens = req.num_computed_tokens
        self.running.append(twin)
        return twin, copies

    def retire_finished(self) -> list[Request]:
        """Release every running request whose stop rules fired this step (in running order)."""
        done = [r for r in self.running if r.finish_reason is not None]
        for r in done:
            self.finish(r, r.finish_reason)
        return done

    def abort(self, req: Request, reason: str = "aborted") -> bool:
        """Drop a request wherever it is (a client went away, a generate call was interrupted): its KV blocks go
        back at once. False when it had already finished."""
        if req.is_finished:
            return False
        if req in self.waiting:
            self.waiting.remove(req)
        if req in self.running:
            self.running.remove(req)
        if self.kv.has(req.request_id):
            self.kv.free(req.request_id)
        req.status = RequestStatus.FINISHED
        req.finish_reason = reason
        return True
