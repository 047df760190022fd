"""General warmup: after the KV pool is sized, run one batch at each max shape (a pure context batch with the
max token count; a pure generation batch with the max batch size) through the real step, as engines do to
pre-populate their memory pools. An out-of-memory error there is tolerated: logged with TensorRT-LLM's wording
and recorded as a `warmup_oom` event. That tolerance is exactly what lets a half-finished spec-dec forward leave
its saved state behind when the worker is not guarded."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import torch

from .config import SamplingParams

if TYPE_CHECKING:
    from .engine import Engine

log = logging.getLogger("specdec_eval.warmup")
_WARMUP = SamplingParams(max_new_tokens=2, ignore_eos=True)


def max_shapes(engine: Engine) -> list[tuple[int, int]]:
    """(num_tokens, num_generation_requests): the pure-context shape, then the pure-generation shape."""
    cfg, k = engine.config, (engine.config.spec.max_draft_len if engine.config.spec else 0)
    free_tokens = engine.kv_manager.num_free_blocks * engine.kv_layout.block_size - 2 * k - 1
    tokens = max(1, min(cfg.max_num_tokens, engine.max_seq_len - 1, free_tokens))
    batch = max(1, min(cfg.max_batch_size, tokens // (1 + k)))
    return [(tokens, 0), (batch, batch)]


def general_warmup(engine: Engine) -> list[dict]:
    """Run the max shapes; return the warmup_oom events it recorded."""
    oom_events = []
    for num_tokens, num_gen in max_shapes(engine):
        log.info("Run warmup with %d tokens, include %d generation tokens", num_tokens, num_gen)
        try:
            _run_shape(engine, num_tokens, num_gen)
        except torch.OutOfMemoryError as exc:
            if engine.tp.size > 1:
                raise  # skipping on one rank would leave its peers waiting in a collective
            log.warning(
                "OOM during general warmup with %d tokens, %d generation tokens. Skipping.", num_tokens, num_gen
            )
            requested, free = engine.memory_budget.last_request
            oom_events.append(
                engine.events.emit(
                    "warmup_oom",
                    phase="general",
                    num_tokens=num_tokens,
                    num_gen_tokens=num_gen,
                    requested_bytes=requested,
                    free_bytes=free,
                    error=str(exc),
                )  # fmt: skip
            )
            if engine.device.type == "cuda":
                torch.cuda.empty_cache()
        except Exception as exc:
            # Not an OOM, e.g. the stale-state assertion left by an earlier unguarded OOM. Recorded, not hidden:
            # the same failure will meet the first real request, where it fails the run.
            engine.events.emit("forward_error", phase="warmup", error=f"{type(exc).__name__}: {exc}",
                               request_ids=[], num_tokens=num_tokens, num_gen_tokens=num_gen)  # fmt: skip
            log.error("warmup with %d tokens failed: %s", num_tokens, exc)
    return oom_events


def _run_shape(engine: Engine, num_tokens: int, num_gen: int) -> None:
    """A context batch of `num_tokens` dummy tokens, or `num_gen` one-token requests taken to a generation step."""
    scheduler = engine.new_scheduler()
    lengths = [num_tokens] if num_gen == 0 else [1] * num_gen
    for i, n in enumerate(lengths):
        scheduler.add(engine.make_request(-1 - i, [0] * n, _WARMUP))  # negative ids never meet real requests
    executor = engine.executor
    executor.scheduler = scheduler
    budget = engine.memory_budget
    try:
        steps = 1 if num_gen == 0 else 2  # generation shape: the contexts first, then the generation step
        for _ in range(steps):
            budget.warmup_step = executor.num_steps
            executor.step()
    finally:
        budget.warmup_step = None
        for req in scheduler.running + list(scheduler.waiting):
            if engine.kv_manager.has(req.request_id):
                engine.kv_manager.free(req.request_id)
