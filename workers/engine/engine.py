"""The local engine: `Engine.build(config)`, an `InferenceEngine`.

Two ways in, one loop: `add_request` / `step` / `abort` (what a server drives, so a request that arrives while
others decode joins the running batch at the next step, like vLLM's engine core), and `generate(prompts)`, a thin
loop over them that returns outputs in prompt order.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import torch

from ...errors import UserError
from ..config import EngineConfig, SamplingParams
from ..events import EventLog
from ..faults import FaultInjector
from ..interface import (
    EngineIdentity,
    GenerateStats,
    GenerationOutput,
    OutputSink,
    ProgressFn,
    Prompt,
    RequestDelta,
    ScoredOutput,
    ScoreRequest,
)
from ..kv_cache import make_kv_cache_manager
from ..loading.checkpoint import Checkpoint
from ..loading.tokenizer import encode_any, eos_token_ids
from ..memory.budget import MemoryBudget
from ..memory.device import dtype_name, release_memory
from ..model.attn_metadata import AttentionMetadata
from ..model.causal_lm import CausalLM
from ..model.layers.paged_kv import PagedKV
from ..model.parallel import TPGroup
from ..planted import build_step_parts, planted_worker_class, rewind_leak_hook
from ..sampling.rejection import request_stream
from ..spec import spec_method
from ..spec.base import DraftParts, SpecContext
from ..spec.metrics import AcceptanceStats
from .executor import Executor, ExecutorParts, StepOutput
from .parts import EngineParts, build_parts, max_seq_len, weights_bytes
from .request import Request
from .scheduler import Scheduler
from .stopping import StopRules
from .warmup import general_warmup, max_shapes

__all__ = ["Engine", "GenerateStats", "GenerationOutput", "Prompt"]


class Engine:
    @classmethod
    def build(
        cls,
        config: EngineConfig,
        tp: TPGroup | None = None,
        checkpoint: Checkpoint | None = None,
        tokenizer: Any = None,
        model: CausalLM | None = None,
    ) -> Engine:
        """Load the checkpoint, build the models, size the KV cache, construct the engine and run its general warmup
        (on, or auto on CUDA). checkpoint / tokenizer: already-loaded ones, shared between engines (tests, A/B);
        model: a target model already built from `checkpoint` in this dtype, on this device and TP group, to share
        its weights (the twin audit's engine)."""
        engine = cls(build_parts(config, tp, checkpoint, tokenizer, model))
        if config.warmup == "on" or (config.warmup == "auto" and engine.device.type == "cuda"):
            general_warmup(
                engine.executor,
                engine.warmup_shapes(),
                engine.memory_budget,
                engine._warmup_request,
                stop_on_oom=engine.tp.size > 1,
            )
        return engine

    def __init__(self, parts: EngineParts) -> None:
        """An engine over built parts: its events and faults, the KV pool and its manager, the spec worker, one
        scheduler and one executor for the engine's life (requests of any caller share the running batch), with
        any planted bug `--inject` asks for swapped into the step."""
        config = self.config = parts.config
        self.tp, self.checkpoint, self._tokenizer = parts.tp, parts.checkpoint, parts.tokenizer
        self.model_config = self.checkpoint.config
        self.device, self.dtype = parts.device, parts.dtype
        self.model, self.draft_model = parts.model, parts.draft_model
        self.kv_layout, self.memory = parts.kv_layout, parts.memory
        self.max_seq_len = max_seq_len(config, self.checkpoint)
        self.eos_ids = eos_token_ids(self._tokenizer, self.model_config)
        events_path = config.events_path.format(rank=self.tp.job_rank) if config.events_path else None
        self.events = EventLog(rank=self.tp.job_rank, path=events_path)
        self.faults = FaultInjector.from_strings(config.inject, self.events, config.seed) if config.inject else None
        self.spec_method = spec_method(config.spec.algorithm) if config.spec else None
        self.kv_manager = make_kv_cache_manager(
            self.kv_layout,
            enable_block_reuse=config.kv_cache.enable_block_reuse,
            window_tokens=1 + self.max_draft_len,
            max_batch_size=config.max_batch_size,
            leaks_on_rewind=rewind_leak_hook(self.faults, lambda: self.executor.num_steps),
        )
        self.kv = PagedKV.allocate(self.kv_layout, self.dtype, self.device, self._wants_decode_copy())
        held = self.weights_bytes + self.kv_layout.total_bytes
        self.memory_budget = MemoryBudget(self.device, self.memory.total_bytes, held, self.events, self.faults)
        self.spec_worker = self._build_spec_worker() if self.spec_method is not None else None
        k = self.max_draft_len
        self.scheduler = Scheduler(
            self.kv_manager,
            max_batch_size=config.max_batch_size,
            max_num_tokens=config.max_num_tokens,
            tokens_per_generation=1 + k,
            kv_lookahead=self.spec_method.kv_lookahead(k) if self.spec_method else 0,  # draft KV past the verified
        )
        self.stop_rules = StopRules(self._tokenizer, self.eos_ids)
        self.executor = Executor(self._executor_parts())
        self.last_stats = GenerateStats()
        self.closed = False
        self._next_request_id = 0
        self._served: dict[int, Request] = {}  # requests added one at a time, by id
        self._leaked_reported = 0  # KV blocks already named by a kv_block_leak event

    # --- construction ---------------------------------------------------------------------------------

    def _build_spec_worker(self):
        """The spec method's worker (with any planted proposer bug mixed in), given what it drafts with only."""
        drafter = None
        if self.draft_model is not None:
            embed = self.model.model.embed_tokens
            drafter = DraftParts(self.draft_model, embed, self.model.config, self.kv, self.tp)
        context = SpecContext(self.config.spec, self.events, self.memory_budget, self.faults, drafter)
        return planted_worker_class(self.spec_method.worker_class(), self.faults)(context)

    def _executor_parts(self) -> ExecutorParts:
        """What the step runs on, with each planted bug `--inject` asks for swapped in."""
        step = build_step_parts(self.model, self.spec_worker, self.faults, lambda: self.executor.num_steps)
        return ExecutorParts(
            model=self.model,
            kv=self.kv,
            scheduler=self.scheduler,
            meta=AttentionMetadata(self.kv_layout.block_size, self.device),
            stop=self.stop_rules,
            memory=self.memory_budget,
            events=self.events,
            faults=self.faults,
            max_retries=self.config.max_retries,
            target=step.target,
            verifier=step.verifier,
            proposer=step.proposer,
        )

    def _wants_decode_copy(self) -> bool:
        wanted = self.config.kv_cache.decode_copy
        return wanted if wanted is not None else self.device.type == "cpu"

    @property
    def weights_bytes(self) -> int:
        """Target and draft head parameters on this rank."""
        return weights_bytes(self.model, self.draft_model)

    @property
    def max_draft_len(self) -> int:
        return self.config.spec.max_draft_len if self.config.spec else 0

    def warmup_shapes(self) -> list[tuple[int, int]]:
        """(num_tokens, num_generation_requests) of the general warmup: pure context, then pure generation."""
        return max_shapes(
            self.config,
            self.kv_manager.num_free_blocks * self.kv_layout.block_size,
            self.max_seq_len,
            self.max_draft_len,
        )

    def _warmup_request(self, index: int, token_ids: list[int], params: SamplingParams) -> Request:
        return self.make_request(index, token_ids, params, request_id=-1 - index)  # never meets a real request

    # --- the engine interface -------------------------------------------------------------------------

    @property
    def identity(self) -> EngineIdentity:
        return identity_of(self.config, dtype_name(self.dtype))

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    def encode(self, prompt: Prompt) -> list[int]:
        return encode_any(self._tokenizer, prompt)

    def collect_events(self) -> list[dict[str, Any]]:
        return self.events.events

    def reported_acceptance(self) -> dict[str, Any] | None:
        total = self.executor.acceptance
        return None if total is None else {**total.to_dict(), "source": "engine counters"}

    def close(self) -> None:
        """Abort every queued or running request and release what the engine holds: its KV pool and decode copies,
        its executor, spec worker, draft head and target model (weights shared with another engine stay with that
        one). Their memory is free when this returns; a closed engine serves nothing more."""
        if self.closed:
            return
        for req in self.scheduler.running + list(self.scheduler.waiting):
            self.scheduler.abort(req)
        self.kv.release()
        for part in ("executor", "spec_worker", "scheduler", "kv_manager", "memory_budget", "draft_model", "model"):
            setattr(self, part, None)
        self.closed = True
        release_memory(self.device)

    # --- requests one at a time (serving: a `ServingEngine`) -------------------------------------------

    def add_request(self, prompt: Prompt, sampling: SamplingParams | None = None) -> int:
        """Queue a request; it joins the running batch at the next step. Returns its request id."""
        self._check_open()
        req = self.make_request(0, self.encode(prompt), sampling or SamplingParams())
        self._served[req.request_id] = req
        self.scheduler.add(req)
        return req.request_id

    def step(self) -> list[RequestDelta]:
        out = self._step()
        if not self.scheduler.has_work:
            self.check_kv_drained("serving: idle after a step")
        deltas = {rid: RequestDelta(rid, tokens) for rid, tokens in out.new_tokens.items() if rid in self._served}
        for req in out.finished:
            if self._served.pop(req.request_id, None) is not None:
                delta = deltas.setdefault(req.request_id, RequestDelta(req.request_id, []))
                delta.finished, delta.output = True, self.output_of(req)
        return list(deltas.values())

    def abort(self, request_id: int) -> bool:
        """Stop a served request now (its client went away): its KV blocks go back at once."""
        req = self._served.pop(request_id, None)
        aborted = req is not None and self.scheduler.abort(req)
        if aborted and not self.scheduler.has_work:
            self.check_kv_drained("serving: idle after an abort")
        return aborted

    def check_kv_drained(self, where: str) -> dict[str, Any] | None:
        """Once every request has finished, every KV block is free or cached-free. A block still referenced that no
        live request holds was leaked: a `kv_block_leak` event (a failing one) naming how many, and the requests
        that took them from the pool; emitted when the count grows, so a leak is named once. Returns the event."""
        leaked = self.kv_manager.unowned_blocks()
        if len(leaked) <= self._leaked_reported:
            return None
        self._leaked_reported = len(leaked)
        holders = sorted({int(h) for h in leaked.values() if isinstance(h, int) and h >= 0})  # warmup ids are < 0
        return self.events.emit(
            "kv_block_leak",
            num_blocks=len(leaked),
            blocks=sorted(leaked)[:32],
            requests=holders[:32],
            num_requests=len(holders),
            detected_at=where,
            free_blocks=self.kv_manager.num_free_blocks,
            total_blocks=self.kv_manager.num_blocks,
        )

    @property
    def has_unfinished_requests(self) -> bool:
        return self.scheduler.has_work

    def kv_usage(self) -> dict[str, int]:
        return {
            "num_blocks": self.kv_manager.num_blocks,
            "free_blocks": self.kv_manager.num_free_blocks,
            "live_requests": len(self.scheduler.running) + len(self.scheduler.waiting),
        }

    def _step(self) -> StepOutput:
        self._check_open()
        return self.executor.step()

    def _check_open(self) -> None:
        if self.closed:
            raise RuntimeError("this engine is closed (Engine.close released its KV pool and model)")

    def output_of(self, req: Request) -> GenerationOutput:
        end = req.finish_time or time.perf_counter()
        return GenerationOutput(
            index=req.index,
            prompt_token_ids=req.prompt_token_ids,
            token_ids=list(req.output_token_ids),
            text=self.stop_rules.final_text(req),
            finish_reason=req.finish_reason or "length",
            error=req.error,
            logprobs=list(req.output_logprobs) if req.sampling.logprobs is not None else None,
            stats={
                "num_prompt_tokens": len(req.prompt_token_ids),
                "num_output_tokens": len(req.output_token_ids),
                "num_cached_tokens": req.num_cached_tokens,
                "num_steps": req.num_steps,
                "num_preemptions": req.num_preemptions,
                "num_retries": req.num_retries,
                "ttft_s": round((req.first_token_time or end) - req.arrival_time, 4),
                "latency_s": round(end - req.arrival_time, 4),
                # wall-clock times (seconds since the epoch) of its arrival and its end: what `drift` orders by
                "sent_at": round(time.time() - (time.perf_counter() - req.arrival_time), 4),
                "finished_at": round(time.time() - (time.perf_counter() - end), 4),
                **({"acceptance": req.spec_stats.to_dict()} if req.spec_stats else {}),
            },
        )

    # --- a batch of prompts ---------------------------------------------------------------------------

    def generate(
        self,
        prompts: Sequence[Prompt],
        sampling: SamplingParams | Sequence[SamplingParams] | None = None,
        progress: ProgressFn | None = None,
        sink: OutputSink | None = None,
    ) -> list[GenerationOutput]:
        """Run every prompt to completion with continuous batching; outputs come back in prompt order. The sink,
        if given, receives each output as soon as its request finishes (to persist work for resume)."""
        params = per_prompt(sampling, len(prompts))
        requests = self._requests(prompts, params)
        self._run(requests, {id(r): sink for r in requests}, prompts, params, progress)
        return [self.output_of(r) for r in requests]

    def generate_paired(
        self,
        prompts: Sequence[Prompt],
        sampling: SamplingParams | Sequence[SamplingParams] | None = None,
        progress: ProgressFn | None = None,
        sink: OutputSink | None = None,
        plain_sink: OutputSink | None = None,
    ) -> tuple[list[GenerationOutput], list[GenerationOutput]]:
        """Paired decoding (a spec-dec engine only): each prompt is prefilled once; a speculative request and a
        plain twin then decode from that prefill (shared KV blocks, copy-on-write for the partial last one), each
        with its own output and counters. Returns (speculative outputs, plain outputs), both in prompt order: the
        run and its lossless baseline from one prefill, each what a separate run would give."""
        if self.config.spec is None:
            raise UserError("paired decoding needs a spec-dec engine (--spec METHOD, e.g. eagle3)")
        params = per_prompt(sampling, len(prompts))
        requests = self._requests(prompts, params)
        twins = []
        for req in requests:
            twin = self.make_request(req.index, req.prompt_token_ids, req.sampling)
            twin.speculative, twin.spec_stats, twin.parked = False, None, True
            req.twin, twin.twin = twin, req
            twins.append(twin)
        sinks = {**{id(r): sink for r in requests}, **{id(t): plain_sink for t in twins}}
        self._run(requests + twins, sinks, prompts, params, progress, queued=requests)
        return [self.output_of(r) for r in requests], [self.output_of(t) for t in twins]

    def _requests(self, prompts: Sequence[Prompt], params: list[SamplingParams]) -> list[Request]:
        tokens = [self.encode(p) for p in prompts]  # every prompt is checked before any is queued
        return [self.make_request(i, t, s) for i, (t, s) in enumerate(zip(tokens, params, strict=True))]

    def _run(self, requests, sinks, prompts, params, progress, queued=None) -> None:
        """Step until every request is finished, handing each finished one (not failed) to its sink."""
        self._check_open()
        for r in requests if queued is None else queued:
            self.scheduler.add(r)
        stats = GenerateStats(len(requests), sum(len(r.prompt_token_ids) for r in requests))
        start, first_step = time.perf_counter(), self.executor.num_steps
        reported: set[int] = set()
        try:
            while not all(r.is_finished for r in requests):
                self._step()
                for r in requests:
                    sink = sinks.get(id(r))
                    if sink is not None and r.is_finished and id(r) not in reported and r.finish_reason != "error":
                        reported.add(id(r))
                        sink.put(prompts[r.index], params[r.index], self.output_of(r))
                self._update_stats(stats, requests, start, first_step)
                if progress is not None:
                    if self.config.spec:
                        stats.acceptance = _acceptance_of(requests, self.max_draft_len)  # live, for the progress line
                    progress(sum(r.is_finished for r in requests), len(requests), stats)
        finally:
            for r in requests:  # an interrupted call must not keep blocks reserved for requests nobody will finish
                r.parked = False
                self.scheduler.abort(r)
        self.check_kv_drained("generate: every request finished")
        stats.num_failed = sum(r.finish_reason == "error" for r in requests)
        stats.num_retries = sum(r.num_retries for r in requests)
        stats.num_preemptions = sum(r.num_preemptions for r in requests)
        if self.config.spec:
            stats.acceptance = _acceptance_of(requests, self.max_draft_len)
        self.last_stats = stats

    def _update_stats(self, stats: GenerateStats, requests: list[Request], start: float, first_step: int) -> None:
        stats.num_steps = self.executor.num_steps - first_step
        stats.num_output_tokens = sum(len(r.output_token_ids) for r in requests)
        stats.elapsed_s = time.perf_counter() - start
        if stats.all_started_s is None and all(r.first_token_time is not None for r in requests):
            stats.all_started_s, stats.tokens_when_all_started = stats.elapsed_s, stats.num_output_tokens

    @torch.inference_mode()
    def score(self, pairs: Sequence[tuple[list[int], list[int]]]) -> list[tuple[float, bool]]:
        """(log p(continuation | context), greedy?) for each (context ids, continuation ids) pair."""
        from .scoring import score_continuation

        self._check_open()
        limit = min(self.max_seq_len, self.config.max_num_tokens) + 1
        return [score_continuation(self.executor, context, continuation, limit) for context, continuation in pairs]

    def score_outputs(self, requests: Sequence[ScoreRequest]) -> list[ScoredOutput]:
        """Teacher forcing: per request, one prefill-shaped pass over prompt +
        output, with each output token's exact place in the sampling distribution it was sampled from."""
        return [self._score_output(r) for r in requests]

    def _score_output(self, request: ScoreRequest) -> ScoredOutput:
        from .teacher_forcing import teacher_force

        sampled = not request.sampling.greedy
        if not request.output_token_ids:
            return ScoredOutput([], [], [] if sampled else None)
        tokens = list(request.prompt_token_ids) + list(request.output_token_ids)
        if not request.prompt_token_ids or len(tokens) > self.max_seq_len:
            why = "an empty prompt" if not request.prompt_token_ids else f"{len(tokens)} tokens"
            return ScoredOutput([], [], None, error=f"cannot score {why} (max_seq_len {self.max_seq_len})")
        try:
            return teacher_force(
                self.executor,
                tokens,
                len(request.prompt_token_ids),
                request.top_logprobs,
                self.config.max_num_tokens,
                request.sampling,
            )
        except UserError as e:
            return ScoredOutput([], [], None, error=str(e))

    def make_request(
        self, index: int, token_ids: list[int], params: SamplingParams, request_id: int | None = None
    ) -> Request:
        if not token_ids:
            raise UserError(f"prompt {index} is empty")
        limit = min(self.max_seq_len - 1, self.config.max_num_tokens)
        if len(token_ids) > limit:
            raise UserError(
                f"prompt {index} has {len(token_ids)} tokens; this engine takes at most {limit} "
                f"(max_seq_len {self.max_seq_len}, max_num_tokens {self.config.max_num_tokens})"
            )
        seed = None
        if not params.greedy:
            seed = params.seed if params.seed is not None else self.default_seed(index)
        if request_id is None:
            request_id, self._next_request_id = self._next_request_id, self._next_request_id + 1
        max_new = min(params.max_new_tokens, self.max_seq_len - len(token_ids))
        req = Request(request_id, list(token_ids), params, max_new, seed, index=index)
        if seed is not None and self.config.spec is not None and self.config.spec.sampling != "coupled":
            req.stream = request_stream(seed)
        if self.config.spec:
            req.spec_stats = AcceptanceStats(self.config.spec.max_draft_len)
        return req

    def default_seed(self, index: int) -> int:
        """The sampling seed of prompt `index` of a call when its parameters name none."""
        return self.config.seed * 1_000_003 + index


def identity_of(config: EngineConfig, resolved_dtype: str | None = None) -> EngineIdentity:
    """What a local engine of this configuration reports (also computed without building one, to find runs)."""
    record = asdict(config)
    record.pop("events_path", None)  # where events go does not shape outputs
    spec = config.spec
    return EngineIdentity(
        kind="local",
        model=config.model,
        spec=spec.algorithm if spec else None,
        max_draft_len=spec.max_draft_len if spec else 0,
        kv_cache=config.kv_cache.version,
        dtype=config.dtype,
        resolved_dtype=resolved_dtype,
        tp_size=config.tp_size,
        world_size=config.tp_size,
        config=record,
    )


def per_prompt(sampling: SamplingParams | Sequence[SamplingParams] | None, n: int) -> list[SamplingParams]:
    """One SamplingParams per prompt."""
    sampling = sampling or SamplingParams()
    params = [sampling] * n if isinstance(sampling, SamplingParams) else list(sampling)
    if len(params) != n:
        raise UserError(f"{n} prompts but {len(params)} sampling parameter sets")
    return params


def _acceptance_of(requests: list[Request], max_draft_len: int) -> dict[str, Any]:
    total = AcceptanceStats(max_draft_len)
    for r in requests:
        if r.spec_stats is not None:  # plain twins of paired decoding have none
            total.merge(r.spec_stats)
    return total.to_dict()
