"""Data-parallel serving under torchrun: rank 0 drives the evaluation, every replica serves a share.

Rank 0 runs lm-eval as in a single process, but its engine is a `ShardedEngine`: each generate / score call is
broadcast on a control group (gloo, so it also works beside NCCL), every TP group serves the requests whose index
falls to its replica (round robin), and the replica leaders send their results back to rank 0, which puts them
in request order. The other ranks sit in `serve_forever` until rank 0 sends "stop".

If any rank raises or dies, its process exits non-zero and torchrun's agent ends the whole job, so no collective
waits forever; the control group's timeout bounds the rest.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch.distributed as dist

from ..workers.engine import Engine, GenerateStats, GenerationOutput
from ..workers.parallel import TPGroup
from ..workers.spec.metrics import AcceptanceStats
from .layout import Layout


@dataclass
class World:
    rank: int
    layout: Layout
    tp: TPGroup
    control: Any  # gloo process group spanning every rank

    @property
    def dp_index(self) -> int:
        return self.layout.dp_index_of(self.rank)

    @property
    def is_replica_leader(self) -> bool:
        return self.tp.is_leader


def init_world(device_type: str, layout_for: Callable[[int], Layout], timeout_s: float) -> World:
    """Start the default group (NCCL on CUDA, gloo on CPU), then one TP group per replica and the control group.
    Every rank creates every group, in the same order, as torch.distributed requires."""
    import os

    import torch

    backend = "nccl" if device_type == "cuda" else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    timeout = datetime.timedelta(seconds=timeout_s)
    dist.init_process_group(backend=backend, timeout=timeout)
    rank, world = dist.get_rank(), dist.get_world_size()
    layout = layout_for(world)
    groups = [dist.new_group(layout.tp_group_of(d * layout.tp), timeout=timeout) for d in range(layout.dp)]
    mine = layout.tp_group_of(rank)
    tp = TPGroup(rank=mine.index(rank), size=layout.tp, group=groups[layout.dp_index_of(rank)], src_rank=mine[0],
                 global_rank=rank)  # fmt: skip
    control = dist.new_group(backend="gloo", timeout=timeout) if backend == "nccl" else dist.group.WORLD
    return World(rank, layout, tp, control)


def _broadcast(obj: Any, world: World) -> Any:
    box = [obj]
    dist.broadcast_object_list(box, src=0, group=world.control)
    return box[0]


def _gather(obj: Any, world: World) -> list[Any] | None:
    out = [None] * dist.get_world_size() if world.rank == 0 else None
    dist.gather_object(obj, out, dst=0, group=world.control)
    return out


def _serve(
    engine: Engine, world: World, command: tuple, progress: Callable | None = None, seen: Callable | None = None
) -> Any:
    """This rank's share of one command; only replica leaders return results (TP partners computed the same)."""
    kind = command[0]
    dp, idx = world.layout.dp, world.dp_index
    if kind == "generate":
        _, prompts, sampling, cache_dir = command
        mine = [i for i in range(len(prompts)) if i % dp == idx]
        params = [sampling[i] for i in mine] if isinstance(sampling, list) else sampling
        on_output = None
        if cache_dir and world.is_replica_leader:  # finished work survives a rank failure, for --resume
            from ..evals.resume import GenerationCache

            cache = GenerationCache(cache_dir, f"rank{world.rank}", load=False)

            def on_output(out, cache=cache) -> None:
                i = mine[out.index]
                cache.put(prompts[i], sampling[i] if isinstance(sampling, list) else sampling, out)
                if seen is not None:  # rank 0's own share feeds the running score
                    seen(type(out)(**{**out.__dict__, "index": i}))

        elif seen is not None:

            def on_output(out) -> None:
                seen(type(out)(**{**out.__dict__, "index": mine[out.index]}))

        outputs = engine.generate([prompts[i] for i in mine], params, progress=progress, on_output=on_output)
        outputs = outputs if mine else []
        for i, out in zip(mine, outputs, strict=True):
            out.index = i
        return (outputs, engine.last_stats) if world.is_replica_leader else None
    if kind == "score":
        _, pairs = command
        mine = [i for i in range(len(pairs)) if i % dp == idx]
        results = list(zip(mine, engine.score([pairs[i] for i in mine]), strict=True))
        return results if world.is_replica_leader else None
    if kind == "events":
        return engine.events.events
    raise ValueError(f"unknown command {kind!r}")


def serve_forever(engine: Engine, world: World) -> None:
    """Ranks other than 0: execute rank 0's commands until it says stop."""
    while True:
        command = _broadcast(None, world)
        if command[0] == "stop":
            return
        _gather(_serve(engine, world, command), world)


class ShardedEngine:
    """Rank 0's handle on every replica, with the parts of Engine's interface the evaluation uses."""

    def __init__(self, engine: Engine, world: World) -> None:
        self.local = engine
        self.world = world
        self.config = engine.config
        self.tokenizer = engine.tokenizer
        self.eos_ids = engine.eos_ids
        self.max_seq_len = engine.max_seq_len
        self.events = engine.events  # replaced by every rank's events in collect_events()
        self.last_stats = GenerateStats()

    def encode(self, prompt) -> list[int]:
        return self.local.encode(prompt)

    def generate(
        self,
        prompts: Sequence,
        sampling,
        progress: Callable | None = None,
        cache_dir: str | None = None,
        on_output: Callable | None = None,
    ) -> list[GenerationOutput]:
        """Every replica serves its share; each replica leader persists its finished outputs under cache_dir."""
        sampling = list(sampling) if not hasattr(sampling, "max_new_tokens") else sampling
        command = ("generate", list(prompts), sampling, cache_dir)
        _broadcast(command, self.world)
        scaled = _scaled_progress(progress, self.world.layout.dp, len(prompts))
        gathered = _gather(_serve(self.local, self.world, command, scaled, on_output), self.world)
        outputs: list[GenerationOutput | None] = [None] * len(prompts)
        stats = []
        for item in gathered:
            if item is None:
                continue
            outs, st = item
            stats.append(st)
            for out in outs:
                outputs[out.index] = out
        self.last_stats = merge_stats(stats, self.config.spec.max_draft_len if self.config.spec else 0)
        return outputs  # type: ignore[return-value]

    def score(self, pairs: list[tuple[list[int], list[int]]]) -> list[tuple[float, bool]]:
        command = ("score", pairs)
        _broadcast(command, self.world)
        gathered = _gather(_serve(self.local, self.world, command), self.world)
        results: list = [None] * len(pairs)
        for item in gathered:
            for i, r in item or []:
                results[i] = r
        return results

    def collect_events(self) -> list[dict[str, Any]]:
        _broadcast(("events",), self.world)
        gathered = _gather(_serve(self.local, self.world, ("events",)), self.world)
        merged = sorted((e for evs in gathered for e in evs), key=lambda e: (e.get("ts", 0.0), e.get("rank", 0)))
        self.events.events = merged
        return merged

    def stop(self) -> None:
        _broadcast(("stop",), self.world)


def _scaled_progress(progress: Callable | None, dp: int, total: int) -> Callable | None:
    """Rank 0 only sees its own replica; with round-robin shards the others advance at about the same pace."""
    if progress is None:
        return None

    def update(done: int, local_total: int, stats) -> None:
        progress(min(total, done * dp), total, stats)

    return update


def merge_stats(stats: list[GenerateStats], max_draft_len: int) -> GenerateStats:
    out = GenerateStats()
    acceptance = AcceptanceStats(max_draft_len) if max_draft_len else None
    for s in stats:
        out.num_requests += s.num_requests
        out.num_prompt_tokens += s.num_prompt_tokens
        out.num_output_tokens += s.num_output_tokens
        out.num_steps = max(out.num_steps, s.num_steps)
        out.num_preemptions += s.num_preemptions
        out.elapsed_s = max(out.elapsed_s, s.elapsed_s)  # replicas run side by side
        out.num_failed += s.num_failed
        out.num_retries += s.num_retries
        if acceptance is not None and s.acceptance:
            a = s.acceptance
            acceptance.merge(AcceptanceStats.from_dict(a))
    if acceptance is not None:
        out.acceptance = acceptance.to_dict()
    return out
