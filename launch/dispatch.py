"""Data-parallel serving under torchrun: rank 0 drives, every replica serves a share.

Rank 0's engine is a `ShardedEngine`, an `InferenceEngine` like the local one: each call is
broadcast on the control group (gloo, so it also works beside NCCL), every TP group serves the requests whose index
falls to its replica (round robin), and the replica leaders send their results back to rank 0, which puts them in
request order. The other ranks sit in `serve_forever` until rank 0 sends "stop".

If any rank raises or dies, its process exits non-zero and torchrun's agent ends the whole job, so no collective
waits forever; the control group's timeout bounds the rest.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import torch.distributed as dist

from ..workers.config import EngineConfig, SamplingParams
from ..workers.engine.engine import Engine, per_prompt
from ..workers.interface import (
    EngineIdentity,
    GenerateStats,
    GenerationOutput,
    OutputSink,
    ProgressFn,
    Prompt,
    ScoredOutput,
    ScoreRequest,
)
from ..workers.memory.sibling import sibling_config
from ..workers.spec.metrics import AcceptanceStats
from .dist import World


def _broadcast(obj: Any, world: World) -> Any:
    box = [obj]
    dist.broadcast_object_list(box, src=0, group=world.control)
    return box[0]


def _gather(obj: Any, world: World) -> list[Any] | None:
    out = [None] * dist.get_world_size() if world.rank == 0 else None
    dist.gather_object(obj, out, dst=0, group=world.control)
    return out


class _Reindexed:
    """A sink for one replica's share: outputs come back with their index in the whole call."""

    def __init__(self, sink: OutputSink, mine: list[int], prompts: list, params: list) -> None:
        self.sink, self.mine, self.prompts, self.params = sink, mine, prompts, params

    def put(self, prompt: Prompt, sampling: SamplingParams, output: GenerationOutput) -> None:
        i = self.mine[output.index]
        self.sink.put(self.prompts[i], self.params[i], replace(output, index=i))

    def for_replica(self, rank: int) -> OutputSink:
        return self


def _serve(engine: Engine, world: World, command: tuple, progress: ProgressFn | None = None) -> Any:
    """This rank's share of one command; only replica leaders return results (TP partners computed the same)."""
    kind = command[0]
    dp, idx = world.layout.dp, world.dp_index
    if kind in ("generate", "generate_paired"):
        _, prompts, params, seeded, sinks = command
        mine = [i for i in range(len(prompts)) if i % dp == idx]
        # Each replica leader persists its finished work through its own sinks (for resume).
        own = sinks.get(world.rank, ()) if world.is_replica_leader else ()
        shares = [_Reindexed(s, mine, prompts, params) if s is not None else None for s in own]
        args = ([prompts[i] for i in mine], [seeded[i] for i in mine], progress, *shares)
        if kind == "generate":
            outputs = (engine.generate(*args),)
        else:
            outputs = engine.generate_paired(*args)
        outputs = tuple([replace(out, index=i) for i, out in zip(mine, outs, strict=True)] for outs in outputs)
        return (outputs, engine.last_stats) if world.is_replica_leader else None
    if kind == "score":
        _, pairs = command
        mine = [i for i in range(len(pairs)) if i % dp == idx]
        results = list(zip(mine, engine.score([pairs[i] for i in mine]), strict=True))
        return results if world.is_replica_leader else None
    if kind == "score_outputs":
        _, requests = command
        mine = [i for i in range(len(requests)) if i % dp == idx]
        scored = list(zip(mine, engine.score_outputs([requests[i] for i in mine]), strict=True))
        return scored if world.is_replica_leader else None
    if kind == "score_plain":
        _, plain_config, requests = command
        mine = [i for i in range(len(requests)) if i % dp == idx]
        plain = plain_sibling(engine, plain_config)
        try:
            scored = list(zip(mine, plain.score_outputs([requests[i] for i in mine]), strict=True))
        finally:
            plain.close()
        return scored if world.is_replica_leader else None
    if kind == "events":
        return engine.collect_events()
    if kind == "acceptance":
        return engine.reported_acceptance() if world.is_replica_leader else None
    raise ValueError(f"unknown command {kind!r}")


def plain_sibling(engine: Engine, plain_config: EngineConfig) -> Engine:
    """A plain engine beside this rank's spec-dec one (the sampled lossless verdict's scorer): the same target weights
    and TP group, no spec worker, a KV pool of one longest sequence. Every rank builds its own, in step."""
    config = sibling_config(replace(plain_config, max_batch_size=1), engine, None, shares_weights=True)
    return Engine.build(config, engine.tp, engine.checkpoint, engine.tokenizer, model=engine.model)


def serve_forever(engine: Engine, world: World) -> None:
    """Ranks other than 0: execute rank 0's commands until it says stop."""
    while True:
        command = _broadcast(None, world)
        if command[0] == "stop":
            return
        _gather(_serve(engine, world, command), world)


class ReplicaFront:
    """What rank 0's handle on a torchrun job knows without asking the other ranks: its own engine's identity (as
    the job's), tokenizer and encoding."""

    def __init__(self, engine: Engine, world: World) -> None:
        self._local = engine
        self._world = world
        self.last_stats = GenerateStats()

    @property
    def identity(self) -> EngineIdentity:
        return replace(self._local.identity, kind="torchrun", world_size=self._world.layout.world_size)

    @property
    def tokenizer(self) -> Any:
        return self._local.tokenizer

    @property
    def config(self) -> EngineConfig:
        """Rank 0's engine configuration (every rank's, with its own rank's TP shard)."""
        return self._local.config

    def encode(self, prompt: Prompt) -> list[int]:
        return self._local.encode(prompt)

    def _merged_acceptance(self, reports: list[dict[str, Any] | None]) -> dict[str, Any] | None:
        """The replicas' acceptance counters summed (None when no replica speculates)."""
        reports = [r for r in reports if r is not None]
        if not reports:
            return None
        total = AcceptanceStats(self._local.max_draft_len)
        for r in reports:
            total.merge(AcceptanceStats.from_dict(r))
        return {**total.to_dict(), "source": f"engine counters of {len(reports)} replicas"}


class ShardedEngine(ReplicaFront):
    """Rank 0's handle on every replica: the same interface as the local engine."""

    def __init__(self, engine: Engine, world: World) -> None:
        super().__init__(engine, world)
        self._events: list[dict[str, Any]] = []
        self._closed = False

    def _call(self, command: tuple, progress: ProgressFn | None = None) -> list[Any]:
        _broadcast(command, self._world)
        return _gather(_serve(self._local, self._world, command, progress), self._world)

    def generate(
        self,
        prompts: Sequence[Prompt],
        sampling: SamplingParams | Sequence[SamplingParams] | None = None,
        progress: ProgressFn | None = None,
        sink: OutputSink | None = None,
    ) -> list[GenerationOutput]:
        """Every replica serves its share; each replica leader hands its finished outputs to its own copy of the
        sink as they finish (rank 0 to the sink itself)."""
        return self._generate("generate", prompts, sampling, progress, (sink,))[0]

    def generate_paired(
        self,
        prompts: Sequence[Prompt],
        sampling: SamplingParams | Sequence[SamplingParams] | None = None,
        progress: ProgressFn | None = None,
        sink: OutputSink | None = None,
        plain_sink: OutputSink | None = None,
    ) -> tuple[list[GenerationOutput], list[GenerationOutput]]:
        """Paired decoding on every replica (the engine's `generate_paired`)."""
        spec, plain = self._generate("generate_paired", prompts, sampling, progress, (sink, plain_sink))
        return spec, plain

    def _generate(self, kind: str, prompts, sampling, progress, sinks: tuple) -> tuple[list[GenerationOutput], ...]:
        layout = self._world.layout
        leaders = [d * layout.tp for d in range(layout.dp)]
        per_rank = {r: tuple(s if s is None or r == 0 else s.for_replica(r) for s in sinks) for r in leaders}
        params = per_prompt(sampling, len(prompts))
        # Seeds follow the prompt's index in the whole call, so a replica samples exactly what one process would
        # (sinks still see the parameters as asked, which is what resume looks them up by).
        seeded = [
            p if p.greedy or p.seed is not None else replace(p, seed=self._local.default_seed(i))
            for i, p in enumerate(params)
        ]
        # Rank 0 keeps its own sink objects (the broadcast carries copies): its share reaches the real ones.
        command = (kind, list(prompts), params, seeded, {r: s for r, s in per_rank.items() if r != 0})
        _broadcast(command, self._world)
        local = (kind, list(prompts), params, seeded, per_rank)
        scaled = _scaled_progress(progress, layout.dp, len(prompts))
        gathered = _gather(_serve(self._local, self._world, local, scaled), self._world)
        outputs: list[list[GenerationOutput | None]] = [[None] * len(prompts) for _ in sinks]
        stats = []
        for item in gathered:
            if item is None:
                continue
            branches, st = item
            stats.append(st)
            for slot, outs in zip(outputs, branches, strict=True):
                for out in outs:
                    slot[out.index] = out
        self.last_stats = merge_stats(stats, self._local.max_draft_len)
        return tuple(outputs)  # type: ignore[return-value]

    def score(self, pairs: Sequence[tuple[list[int], list[int]]]) -> list[tuple[float, bool]]:
        results: list = [None] * len(pairs)
        for item in self._call(("score", list(pairs))):
            for i, r in item or []:
                results[i] = r
        return results

    def score_outputs(self, requests: Sequence[ScoreRequest]) -> list[ScoredOutput]:
        """Every replica scores its share (round robin), as `score` does."""
        results: list = [None] * len(requests)
        for item in self._call(("score_outputs", list(requests))):
            for i, r in item or []:
                results[i] = r
        return results

    def score_outputs_plain(self, plain_config: EngineConfig, requests: Sequence[ScoreRequest]) -> list[ScoredOutput]:
        """`score_outputs` on a plain engine built beside every rank's (`plain_sibling`), closed after: the sampled
        lossless verdict's baseline scoring inside a spec-dec job."""
        results: list = [None] * len(requests)
        for item in self._call(("score_plain", plain_config, list(requests))):
            for i, r in item or []:
                results[i] = r
        return results

    def collect_events(self) -> list[dict[str, Any]]:
        """Every rank's events, merged in time order."""
        gathered = self._call(("events",))
        self._events = sorted((e for evs in gathered for e in evs), key=lambda e: (e.get("ts", 0.0), e.get("rank", 0)))
        return self._events

    def reported_acceptance(self) -> dict[str, Any] | None:
        return self._merged_acceptance(self._call(("acceptance",)))

    def close(self) -> None:
        """The other ranks stop serving (said once: after that no rank is left to hear it)."""
        if not self._closed:
            self._closed = True
            _broadcast(("stop",), self._world)


def _scaled_progress(progress: ProgressFn | None, dp: int, total: int) -> ProgressFn | None:
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
            acceptance.merge(AcceptanceStats.from_dict(s.acceptance))
    if acceptance is not None:
        out.acceptance = acceptance.to_dict()
    return out
