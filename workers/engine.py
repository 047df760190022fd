"""The Python API the evals and the CLI call: `Engine(config).generate(prompts, sampling) -> outputs`."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from .attn_metadata import AttentionMetadata, BatchEntry
from .capacity import plan_capacity
from .checkpoint import Checkpoint, load_checkpoint, preset_of
from .config import EngineConfig, SamplingParams
from .device import resolve_device, resolve_dtype
from .errors import UserError
from .events import EventLog
from .executor import Executor, allocate_kv_pool
from .faults import FaultInjector
from .kv_cache import make_kv_cache_manager
from .kv_cache.decode_copy import DecodeCopy
from .kv_cache.layout import KVLayout
from .memory import MemoryBudget
from .model import CausalLM
from .parallel import TPGroup
from .request import Request
from .scheduler import Scheduler
from .spec.eagle3 import Eagle3OneModelWorker
from .spec.eagle3_head import Eagle3DraftModel, build_draft_model, resolve_draft_model
from .spec.metrics import AcceptanceStats
from .tokenizer import encode_chat, encode_prompt, eos_token_ids
from .warmup import general_warmup

# A prompt is raw text, token ids, or chat messages ([{"role": ..., "content": ...}, ...]).
Prompt = str | list[int] | list[dict[str, str]]


@dataclass
class GenerationOutput:
    index: int
    prompt_token_ids: list[int]
    token_ids: list[int]
    text: str
    finish_reason: str  # "eos" | "stop" | "length" | "error" (an error is never a normal answer)
    stats: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


@dataclass
class GenerateStats:
    """What one `generate` call did, for progress lines and benchmarks."""

    num_requests: int = 0
    num_prompt_tokens: int = 0
    num_output_tokens: int = 0
    num_steps: int = 0
    num_preemptions: int = 0
    elapsed_s: float = 0.0
    acceptance: dict[str, Any] | None = None  # spec-dec only: AcceptanceStats.to_dict() over all requests
    num_failed: int = 0  # requests that ended with finish reason "error"
    num_retries: int = 0
    running_score: float | None = None  # set by an evaluation layer for its progress line (0-100, so far)
    # When every request had its first token (prefill over), and the output tokens at that moment: the rest of
    # the call is pure decoding, which `decode_tokens` / `decode_s` measure within this one call.
    all_started_s: float | None = None
    tokens_when_all_started: int = 0

    @property
    def output_tokens_per_s(self) -> float:
        return self.num_output_tokens / self.elapsed_s if self.elapsed_s else 0.0

    @property
    def decode_s(self) -> float:
        return self.elapsed_s - self.all_started_s if self.all_started_s is not None else 0.0

    @property
    def decode_tokens(self) -> int:
        return self.num_output_tokens - self.tokens_when_all_started if self.all_started_s is not None else 0


class Engine:
    def __init__(
        self,
        config: EngineConfig,
        tp: TPGroup | None = None,
        checkpoint: Checkpoint | None = None,
        tokenizer: Any = None,
    ) -> None:
        """checkpoint / tokenizer: pass already-loaded ones to share them between engines (tests, A/B)."""
        self.config = config
        self.tp = tp or TPGroup()
        if config.tp_size != self.tp.size:
            raise UserError(f"engine config asks for TP size {config.tp_size}, but the TP group has {self.tp.size}")
        self.checkpoint = checkpoint or load_checkpoint(config.model)
        self.model_config = self.checkpoint.config
        self.model_config.check_tp_size(self.tp.size)
        self.device = resolve_device(config.device)
        self.dtype = resolve_dtype(config.dtype, self.device)
        self.max_seq_len = min(config.max_seq_len or 4096, self.model_config.max_position_embeddings)

        self.model = self._build_model()
        self.tokenizer = tokenizer if tokenizer is not None else self.checkpoint.load_tokenizer()
        self.eos_ids = eos_token_ids(self.tokenizer, self.model_config)
        events_path = config.events_path.format(rank=self.tp.job_rank) if config.events_path else None
        self.events = EventLog(rank=self.tp.job_rank, path=events_path)
        self.faults = FaultInjector.from_strings(config.inject, self.events, config.seed) if config.inject else None
        self.draft_model = self._build_draft_model() if config.spec else None
        self.kv_layout = self._size_kv_cache()
        self.kv_manager = make_kv_cache_manager(
            self.kv_layout,
            enable_block_reuse=config.kv_cache.enable_block_reuse,
            window_tokens=1 + (config.spec.max_draft_len if config.spec else 0),
            max_batch_size=config.max_batch_size,
        )
        self.kv_pool = allocate_kv_pool(self.kv_layout, self.dtype, self.device)
        self.attn_meta = AttentionMetadata(self.kv_layout.block_size, self.device, self._decode_copy())
        self.spec_worker = self._build_spec_worker() if config.spec else None
        # One executor for the engine's life: its step count and attention metadata outlive a generate() call.
        self.executor = Executor(
            self.model, self.kv_pool, None, self.kv_layout.block_size, self.device, self._on_token, self.attn_meta,
            self.spec_worker,
        )  # fmt: skip
        if self.faults is not None and self.faults.wants("target_forward"):
            middle = self.model.model.layers[self.model_config.num_hidden_layers // 2]
            middle.register_forward_pre_hook(lambda *_: self.faults.check("target_forward", self.executor.num_steps))
        self.memory_budget = MemoryBudget(
            self.device,
            self.memory.total_bytes,
            self.weights_bytes + self.kv_layout.total_bytes,
            self.events,
            self.faults,
        )
        self.executor.memory = self.memory_budget
        if self.spec_worker is not None:
            self.spec_worker.memory = self.memory_budget
        self.last_stats = GenerateStats()
        if config.warmup == "on" or (config.warmup == "auto" and self.device.type == "cuda"):
            general_warmup(self)

    # --- construction ---------------------------------------------------------------------------------

    def _build_model(self) -> CausalLM:
        model = CausalLM(self.model_config, self.tp).to(self.dtype)
        model.load_weights(self.checkpoint.tensors())
        return model.to(self.device).eval()

    @torch.inference_mode()
    def _profile_forward(self) -> None:
        """CUDA: one forward at the max context shape with a throw-away KV pool, so the allocator's peak (read by
        `measure_memory`) includes activations before the real pool is sized from what is left."""
        block = self.config.kv_cache.block_size
        n = min(self.config.max_num_tokens, self.max_seq_len - 1)
        blocks = -(-n // block)
        cfg = self.model_config
        pool = torch.zeros(
            cfg.num_hidden_layers, 2, blocks * block, cfg.num_key_value_heads // self.tp.size, cfg.head_dim,
            dtype=self.dtype, device=self.device,
        )  # fmt: skip
        torch.cuda.reset_peak_memory_stats(self.device)
        meta = AttentionMetadata(block, self.device).prepare([BatchEntry(-1, 0, n, list(range(blocks)), True)])
        hidden, _ = self.model(torch.zeros(n, dtype=torch.int64, device=self.device), meta, pool)
        self.model.compute_logits(hidden[meta.last_token_index])
        del pool, hidden
        torch.cuda.synchronize(self.device)
        torch.cuda.empty_cache()  # give the throw-away pool back, so mem_get_info sees it as free

    def _decode_copy(self) -> DecodeCopy | None:
        wanted = self.config.kv_cache.decode_copy
        if wanted is False or (wanted is None and self.device.type != "cpu"):
            return None
        # Bounded by the pool's token capacity: the copy never holds more than the live requests' KV.
        return DecodeCopy(max_tokens=self.kv_layout.max_tokens)

    def _build_draft_model(self) -> Eagle3DraftModel:
        spec = self.config.spec
        head = resolve_draft_model(spec.draft_model, preset_of(self.checkpoint) or self.config.model)
        draft = build_draft_model(self.model_config, head, spec.capture_layers, spec.draft_seed, self.tp)
        return draft.to(self.dtype).to(self.device).eval()

    def _build_spec_worker(self) -> Eagle3OneModelWorker:
        return Eagle3OneModelWorker(
            self.model, self.draft_model, self.kv_pool, self.kv_manager, self.config.spec, self.events, self.tp,
            self.faults,
        )  # fmt: skip

    @property
    def weights_bytes(self) -> int:
        """Target and draft head parameters on this rank."""
        modules = [self.model] + ([self.draft_model] if self.draft_model is not None else [])
        return sum(p.numel() * p.element_size() for m in modules for p in m.parameters())

    def _size_kv_cache(self) -> KVLayout:
        if self.device.type == "cuda":
            self._profile_forward()
        plan = plan_capacity(self.model_config, self.config, weights_bytes=self.weights_bytes)
        self.memory = plan.memory
        return plan.layout

    # --- generation -----------------------------------------------------------------------------------

    def encode(self, prompt: Prompt) -> list[int]:
        if isinstance(prompt, str):
            return encode_prompt(self.tokenizer, prompt)
        if prompt and isinstance(prompt[0], dict):
            return encode_chat(self.tokenizer, prompt)  # type: ignore[arg-type]
        return [int(t) for t in prompt]  # type: ignore[union-attr]

    def generate(
        self,
        prompts: Sequence[Prompt],
        sampling: SamplingParams | Sequence[SamplingParams] | None = None,
        progress: Callable[[int, int, GenerateStats], None] | None = None,
        on_output: Callable[[GenerationOutput], None] | None = None,
    ) -> list[GenerationOutput]:
        """Run every prompt to completion with continuous batching; outputs come back in prompt order.
        on_output, if given, sees each output as soon as its request finishes (to persist work for resume)."""
        sampling = sampling or SamplingParams()
        params = [sampling] * len(prompts) if isinstance(sampling, SamplingParams) else list(sampling)
        if len(params) != len(prompts):
            raise UserError(f"{len(prompts)} prompts but {len(params)} sampling parameter sets")
        pairs = enumerate(zip(prompts, params, strict=True))
        requests = [self.make_request(i, self.encode(p), s) for i, (p, s) in pairs]
        scheduler = self.new_scheduler()
        executor = self.executor
        executor.scheduler = scheduler
        for r in requests:
            scheduler.add(r)
        stats = GenerateStats(len(requests), sum(len(r.prompt_token_ids) for r in requests))
        start, first_step = time.perf_counter(), executor.num_steps
        reported: set[int] = set()
        try:
            while scheduler.has_work:
                try:
                    executor.step()
                except Exception as exc:
                    if scheduler.last_batch is None:
                        raise  # nothing was being served: not a serving error
                    self._on_step_error(scheduler, scheduler.last_batch, exc)
                for r in list(scheduler.running):
                    if r.finish_reason is not None:
                        scheduler.finish(r, r.finish_reason)
                if on_output is not None:
                    for r in requests:
                        if r.is_finished and r.request_id not in reported and r.finish_reason != "error":
                            reported.add(r.request_id)
                            on_output(self._output(r))
                stats.num_steps = executor.num_steps - first_step
                stats.num_output_tokens = sum(len(r.output_token_ids) for r in requests)
                stats.elapsed_s = time.perf_counter() - start
                if stats.all_started_s is None and all(r.first_token_time is not None for r in requests):
                    stats.all_started_s, stats.tokens_when_all_started = stats.elapsed_s, stats.num_output_tokens
                if progress is not None:
                    if self.config.spec:
                        stats.acceptance = self._acceptance(requests)  # live, for the progress line
                    progress(sum(r.is_finished for r in requests), len(requests), stats)
        finally:
            # An aborted call must not keep blocks reserved for requests nobody will finish.
            for r in scheduler.running + list(scheduler.waiting):
                if self.kv_manager.has(r.request_id):
                    self.kv_manager.free(r.request_id)
        stats.num_failed = sum(r.finish_reason == "error" for r in requests)
        stats.num_retries = sum(r.num_retries for r in requests)
        stats.num_preemptions = scheduler.num_preemptions
        if self.config.spec:
            stats.acceptance = self._acceptance(requests)
        self.last_stats = stats
        return [self._output(r) for r in requests]

    def score(self, pairs: Sequence[tuple[list[int], list[int]]]) -> list[tuple[float, bool]]:
        """(log p(continuation | context), greedy?) for each (context ids, continuation ids) pair."""
        from .scoring import score_continuation

        return [score_continuation(self, context, continuation) for context, continuation in pairs]

    def _acceptance(self, requests: list[Request]) -> dict[str, Any]:
        total = AcceptanceStats(self.config.spec.max_draft_len)
        for r in requests:
            total.merge(r.spec_stats)
        return total.to_dict()

    def new_scheduler(self) -> Scheduler:
        """A scheduler for one generate() call (or one warmup shape) over this engine's KV cache."""
        k = self.config.spec.max_draft_len if self.config.spec else 0
        return Scheduler(
            self.kv_manager,
            max_batch_size=self.config.max_batch_size,
            max_num_tokens=self.config.max_num_tokens,
            tokens_per_generation=1 + k,
            kv_lookahead=max(0, k - 1),  # the K-1 draft steps write past the verified tokens
        )

    def _on_step_error(self, scheduler: Scheduler, batch, exc: Exception) -> None:
        """A forward raised: only the requests of that batch are affected. Each is recomputed (bounded by
        max_retries) or fails with finish reason "error"; both are recorded as events, never hidden."""
        error = f"{type(exc).__name__}: {exc}"
        step = self.executor.num_steps
        self.executor.num_steps += 1  # the failed step counts, so a fault due "@STEP" does not fire forever
        self.events.emit(
            "forward_error", error=error, request_ids=[i.request.request_id for i in batch.items], step=step
        )
        for item in batch.items:
            req = item.request
            if req.is_finished:
                continue
            req.num_retries += 1
            if req.num_retries <= self.config.max_retries:
                scheduler.requeue(req)
                self.events.emit("request_retried", request_id=req.request_id, attempt=req.num_retries, reason=error)
            else:
                scheduler.fail(req, error)
                self.events.emit("request_failed", request_id=req.request_id, reason=error, retries=req.num_retries - 1)

    def make_request(self, index: int, token_ids: list[int], params: SamplingParams) -> Request:
        if not token_ids:
            raise UserError(f"prompt {index} is empty")
        limit = min(self.max_seq_len - 1, self.config.max_num_tokens)
        if len(token_ids) > limit:
            raise UserError(
                f"prompt {index} has {len(token_ids)} tokens; this engine takes at most {limit} "
                f"(max_seq_len {self.max_seq_len}, max_num_tokens {self.config.max_num_tokens})"
            )
        generator = None
        if not params.greedy:
            seed = params.seed if params.seed is not None else self.config.seed * 1_000_003 + index
            generator = torch.Generator().manual_seed(seed)
        max_new = min(params.max_new_tokens, self.max_seq_len - len(token_ids))
        req = Request(index, list(token_ids), params, max_new, generator)
        if self.config.spec:
            req.spec_stats = AcceptanceStats(self.config.spec.max_draft_len)
        return req

    def _on_token(self, req: Request, token: int) -> None:
        """Apply the stop rules after each new token: EOS, stop strings, length."""
        if req.first_token_time is None:
            req.first_token_time = time.perf_counter()
        if token in self.eos_ids and not req.sampling.ignore_eos:
            req.finish_reason = "eos"
        elif req.sampling.stop and self._hit_stop_string(req):
            req.finish_reason = "stop"
        elif len(req.output_token_ids) >= req.max_new_tokens:
            req.finish_reason = "length"
        if req.finish_reason is not None:
            req.finish_time = time.perf_counter()

    def _hit_stop_string(self, req: Request) -> bool:
        text = self.tokenizer.decode(req.output_token_ids, skip_special_tokens=True)
        return any(s in text for s in req.sampling.stop)

    def _output(self, req: Request) -> GenerationOutput:
        text = self.tokenizer.decode(req.output_token_ids, skip_special_tokens=True)
        if req.finish_reason == "stop":
            cut = min((text.find(s) for s in req.sampling.stop if s in text), default=len(text))
            text = text[:cut]
        end = req.finish_time or time.perf_counter()
        return GenerationOutput(
            index=req.request_id,
            prompt_token_ids=req.prompt_token_ids,
            token_ids=list(req.output_token_ids),
            text=text,
            finish_reason=req.finish_reason or "length",
            error=req.error,
            stats={
                "num_prompt_tokens": len(req.prompt_token_ids),
                "num_output_tokens": len(req.output_token_ids),
                "num_cached_tokens": req.num_cached_tokens,
                "num_steps": req.num_steps,
                "num_preemptions": req.num_preemptions,
                "num_retries": req.num_retries,
                "ttft_s": round((req.first_token_time or end) - req.arrival_time, 4),
                "latency_s": round(end - req.arrival_time, 4),
                **({"acceptance": req.spec_stats.to_dict()} if req.spec_stats else {}),
            },
        )
