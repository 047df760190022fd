"""General warmup: after the KV pool is sized, run one batch at each max shape (a pure context batch with the
max token count; a pure generation batch with the max batch size) through the real step, as engines do to
pre-populate their memory pools. An out-of-memory error there is tolerated: logged with TensorRT-LLM's wording
and recorded as a `warmup_oom` event. That tolerance is exactly what lets a half-finished spec-dec forward leave
its saved state behind when the worker is not guarded."""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch

from ..config import EngineConfig, SamplingParams
from ..memory.budget import MemoryBudget
from .executor import Executor
from .request import Request

log = logging.getLogger("specdec_eval.warmup")
_WARMUP = SamplingParams(max_new_tokens=2, ignore_eos=True)


def max_shapes(config: EngineConfig, free_tokens: int, max_seq_len: int, max_draft_len: int) -> list[tuple[int, int]]:
    """(num_tokens, num_generation_requests): the pure-context shape, then the pure-generation shape, within what
    the KV pool's `free_tokens` can hold."""
    k = max_draft_len
    tokens = max(1, min(config.max_num_tokens, max_seq_len - 1, free_tokens - 2 * k - 1))
    batch = max(1, min(config.max_batch_size, tokens // (1 + k)))
    return [(tokens, 0), (batch, batch)]


def general_warmup(
    executor: Executor,
    shapes: list[tuple[int, int]],
    memory: MemoryBudget,
    new_request: Callable[[int, list[int], SamplingParams], Request],
    stop_on_oom: bool = False,
) -> list[dict]:
    """Run the shapes through the executor; return the warmup_oom events it recorded. stop_on_oom: under TP a skip
    on one rank would leave its peers waiting in a collective, so an OOM is raised instead."""
    events = executor.events
    oom_events = []
    for num_tokens, num_gen in shapes:
        log.info("Run warmup with %d tokens, include %d generation tokens", num_tokens, num_gen)
        try:
            _run_shape(executor, memory, new_request, num_tokens, num_gen)
        except torch.OutOfMemoryError as exc:
            if stop_on_oom:
                raise
            log.warning(
                "OOM during general warmup with %d tokens, %d generation tokens. Skipping.", num_tokens, num_gen
            )
            requested, free = memory.last_request
            oom_events.append(
                events.emit(
                    "warmup_oom",
                    phase="general",
                    num_tokens=num_tokens,
                    num_gen_tokens=num_gen,
                    requested_bytes=requested,
                    free_bytes=free,
                    error=str(exc),
                )
            )
            if memory.device.type == "cuda":
                torch.cuda.empty_cache()
        except Exception as exc:
            # Not an OOM, e.g. the stale-state assertion left by an earlier unguarded OOM. Recorded, not hidden:
            # the same failure will meet the first real request, where it fails the run.
            events.emit(
                "forward_error",
                phase="warmup",
                error=f"{type(exc).__name__}: {exc}",
                request_ids=[],
                num_tokens=num_tokens,
                num_gen_tokens=num_gen,
            )
            log.error("warmup with %d tokens failed: %s", num_tokens, exc)
    return oom_events


def _run_shape(executor: Executor, memory: MemoryBudget, new_request, num_tokens: int, num_gen: int) -> None:
    """A context batch of `num_tokens` dummy tokens, or `num_gen` one-token requests taken to a generation step."""
    lengths = [num_tokens] if num_gen == 0 else [1] * num_gen
    requests = [new_request(i, [0] * n, _WARMUP) for i, n in enumerate(lengths)]
    for req in requests:
        executor.scheduler.add(req)
    try:
        with memory.warmup():
            for _ in range(1 if num_gen == 0 else 2):  # generation shape: the contexts first, then the generation
                executor.step(recover=False)
    finally:
        for req in requests:
            executor.scheduler.abort(req)
