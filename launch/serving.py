"""`serve --gpus N`: one server on rank 0 of a torchrun job, every replica serving in lockstep.

Rank 0's engine is a `ShardedServingEngine`, a `ServingEngine` like the local one. Each
`step()` broadcasts on the gloo control group the requests added since the last step (each assigned to the replica
with the fewest live requests) and the aborts; every rank applies its replica's share to its local engine and
steps it (TP partners make the same calls, so their collectives meet); the replica leaders send back their deltas,
acceptance counters and KV usage, every rank its new events (one gather), and rank 0 merges them. Request ids are
rank 0's, unique across replicas; each rank maps them to its engine's own ids. The other ranks sit in
`serve_steps_forever` until rank 0 says stop.

Shutdown belongs to rank 0: the others ignore SIGTERM and SIGINT (torchrun and a terminal send them to every rank),
so they keep stepping while rank 0 drains its in-flight requests, and stop when it says so."""

from __future__ import annotations

import os
import signal
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..workers.config import SamplingParams
from ..workers.engine.engine import Engine, per_prompt
from ..workers.interface import GenerationOutput, Prompt, RequestDelta, ScoredOutput, ScoreRequest
from .dispatch import ReplicaFront, _broadcast, _gather
from .dist import World
from .job import Job, JobFailed
from .layout import Layout
from .torchrun import TorchrunSpec, start


@dataclass
class _Replica:
    """One rank's books: rank 0's request ids <-> its engine's, and how many of its events went to rank 0."""

    local_of: dict[int, int] = field(default_factory=dict)
    global_of: dict[int, int] = field(default_factory=dict)
    events_sent: int = 0


@dataclass
class _Reply:
    replica: int
    deltas: list[RequestDelta]
    acceptance: dict[str, Any] | None
    kv: dict[str, int]


def _apply(engine: Engine, world: World, books: _Replica, command: tuple) -> tuple[_Reply | None, list[dict]]:
    """This rank's part of one lockstep exchange: adds and aborts of its replica, then (optionally) one step."""
    _, adds, aborts, do_step = command
    mine = world.dp_index
    for request_id, replica, token_ids, sampling in adds:
        if replica == mine:
            local = engine.add_request(token_ids, sampling)
            books.local_of[request_id], books.global_of[local] = local, request_id
    for request_id in aborts:
        local = books.local_of.pop(request_id, None)
        if local is not None:
            books.global_of.pop(local, None)
            engine.abort(local)
    deltas = []
    for delta in engine.step() if do_step else []:
        request_id = books.global_of.get(delta.request_id)
        if request_id is None:
            continue
        if delta.finished:
            books.local_of.pop(request_id, None)
            books.global_of.pop(delta.request_id, None)
        deltas.append(replace(delta, request_id=request_id))
    events = engine.collect_events()[books.events_sent :]
    books.events_sent += len(events)
    if not world.is_replica_leader:
        return None, events
    return _Reply(mine, deltas, engine.reported_acceptance(), engine.kv_usage()), events


def serve_steps_forever(engine: Engine, world: World) -> None:
    """Ranks other than 0: take part in rank 0's exchanges until it says stop."""
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)  # rank 0 decides when serving ends (see the module docstring)
    books = _Replica()
    while True:
        command = _broadcast(None, world)
        if command[0] == "stop":
            return
        if command[0] == "score_outputs":
            _gather(_score_on_first_replica(engine, world, command[1]), world)
            continue
        _gather(_apply(engine, world, books, command), world)


def _score_on_first_replica(engine: Engine, world: World, requests: list[ScoreRequest]) -> list[ScoredOutput] | None:
    """Teacher forcing between lockstep steps: the first replica's TP group scores (its ranks make the same calls, so
    their collectives meet); the others wait at the gather."""
    if world.dp_index != 0:
        return None
    scored = engine.score_outputs(requests)
    return scored if world.is_replica_leader else None


class ShardedServingEngine(ReplicaFront):
    """Rank 0's handle on every replica, driven one step at a time by the server's engine loop (one thread)."""

    def __init__(self, engine: Engine, world: World) -> None:
        super().__init__(engine, world)
        self._books = _Replica()
        self._next_id = 0
        self._adds: list[tuple[int, int, list[int], SamplingParams]] = []  # not yet broadcast
        self._replica_of: dict[int, int] = {}  # live request id -> replica
        self._load = [0] * world.layout.dp
        self._acceptance: dict[int, dict[str, Any] | None] = {}  # replica -> its engine's counters
        self._kv: dict[int, dict[str, int]] = {}  # replica -> its KV usage
        self._events: list[dict[str, Any]] = []

    @property
    def local_engine(self) -> Engine:
        """Rank 0's own engine (its model limits, tokenizer); never step it directly."""
        return self._local

    # --- the serving protocol -------------------------------------------------------------------------

    def add_request(self, prompt: Prompt, sampling: SamplingParams | None = None) -> int:
        """Queued for the next step on the least loaded replica. A prompt the engine refuses raises here, on
        rank 0, never on a replica."""
        params = sampling or SamplingParams()
        token_ids = self.encode(prompt)
        self._local.make_request(0, token_ids, params, request_id=-1)  # the local engine's checks, nothing queued
        request_id, self._next_id = self._next_id, self._next_id + 1
        dp = len(self._load)
        replica = min(range(dp), key=lambda r: (self._load[r], (r - request_id) % dp))
        self._adds.append((request_id, replica, token_ids, params))
        self._replica_of[request_id] = replica
        self._load[replica] += 1
        return request_id

    def step(self) -> list[RequestDelta]:
        return self._exchange([], do_step=True)

    def abort(self, request_id: int) -> bool:
        """Its KV blocks go back at once (an exchange without a step)."""
        replica = self._replica_of.pop(request_id, None)
        if replica is None:
            return False
        self._load[replica] -= 1
        queued = [add for add in self._adds if add[0] == request_id]
        if queued:  # never broadcast: no replica holds it
            self._adds.remove(queued[0])
        else:
            self._exchange([request_id], do_step=False)
        return True

    @property
    def has_unfinished_requests(self) -> bool:
        return bool(self._replica_of)

    def kv_usage(self) -> dict[str, int]:
        if not self._kv:
            self._exchange([], do_step=False)
        return {k: sum(kv[k] for kv in self._kv.values()) for k in ("num_blocks", "free_blocks", "live_requests")}

    def reported_acceptance(self) -> dict[str, Any] | None:
        if not self._kv:
            self._exchange([], do_step=False)
        return self._merged_acceptance(list(self._acceptance.values()))

    def collect_events(self) -> list[dict[str, Any]]:
        if not self._kv:
            self._exchange([], do_step=False)
        return sorted(self._events, key=lambda e: (e.get("ts", 0.0), e.get("rank", 0)))

    def close(self) -> None:
        _broadcast(("stop",), self._world)

    # --- a batch of prompts (the InferenceEngine call), as a thin loop over the same steps -------------

    def generate(self, prompts: Sequence[Prompt], sampling=None, progress=None, sink=None) -> list[GenerationOutput]:
        """Outputs in prompt order; unseeded sampling takes each prompt's seed by its index, as one process does."""
        params = per_prompt(sampling, len(prompts))
        seeded = [
            p if p.greedy or p.seed is not None else replace(p, seed=self._local.default_seed(i))
            for i, p in enumerate(params)
        ]
        index_of = {self.add_request(prompt, p): i for i, (prompt, p) in enumerate(zip(prompts, seeded, strict=True))}
        outputs: list[GenerationOutput | None] = [None] * len(prompts)
        while self.has_unfinished_requests:
            for delta in self.step():
                if delta.finished and delta.request_id in index_of:
                    i = index_of[delta.request_id]
                    outputs[i] = replace(delta.output, index=i)
                    if sink is not None and outputs[i].finish_reason != "error":
                        sink.put(prompts[i], params[i], outputs[i])
            if progress is not None:
                progress(sum(o is not None for o in outputs), len(prompts), self.last_stats)
        return outputs  # type: ignore[return-value]

    def score(self, pairs):
        raise NotImplementedError("a serving job generates; loglikelihood runs use `run --gpus N`")

    def score_outputs(self, requests: Sequence[ScoreRequest]) -> list[ScoredOutput]:
        """Teacher forcing on the first replica, between two lockstep steps (what `echo` and `prompt_logprobs` ask)."""
        command = ("score_outputs", list(requests))
        _broadcast(command, self._world)
        gathered = _gather(_score_on_first_replica(self._local, self._world, command[1]), self._world)
        return gathered[0]

    # --- one lockstep exchange ----------------------------------------------------------------------

    def _exchange(self, aborts: list[int], do_step: bool) -> list[RequestDelta]:
        command = ("serve_step", self._adds, aborts, do_step)
        self._adds = []
        _broadcast(command, self._world)
        gathered = _gather(_apply(self._local, self._world, self._books, command), self._world)
        deltas: list[RequestDelta] = []
        for reply, events in gathered:
            self._events.extend(events)
            if reply is None:
                continue
            self._acceptance[reply.replica], self._kv[reply.replica] = reply.acceptance, reply.kv
            for delta in reply.deltas:
                if delta.finished:
                    replica = self._replica_of.pop(delta.request_id, None)
                    if replica is not None:
                        self._load[replica] -= 1
                deltas.append(delta)
        return deltas


def launch_serving(job: Job, spec: TorchrunSpec, layout: Layout, device: str) -> None:
    """Start the serving job and wait until it ends. SIGTERM or Ctrl-C to this process goes to rank 0 as SIGTERM
    (it drains, then stops the other ranks). Success is rank 0's result file, whatever torchrun's own status: its
    agent exits non-zero when it was signalled too (Ctrl-C in a terminal reaches every process of the group)."""
    backend = "NCCL" if device == "cuda" else "gloo"
    print(
        f"{layout.world_size} {'GPU' if device == 'cuda' else 'CPU'} ranks over {backend}: {layout.describe()}",
        file=sys.stderr,
    )
    with tempfile.TemporaryDirectory(prefix="specdec-serve-") as tmp:
        result_file, job_file, pid_file = Path(tmp) / "result.json", Path(tmp) / "job.json", Path(tmp) / "rank0.pid"
        job = replace(job, payload={**job.payload, "pid_file": str(pid_file)}, mode="serving")
        job_file.write_text(job.to_json(str(result_file)), encoding="utf-8")
        spec.job_file = str(job_file)

        def to_rank0(sig: int, frame) -> None:
            try:
                pid = int(pid_file.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                raise KeyboardInterrupt from None  # rank 0 is not serving yet: `start` ends the whole job
            os.kill(pid, signal.SIGTERM)

        previous = {sig: signal.signal(sig, to_rank0) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            code, failures = start(spec, dict(os.environ))
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        if result_file.exists():
            return
        if failures:
            raise JobFailed("; ".join(f.describe() for f in failures), code)
        raise JobFailed(f"the serving job ended without rank 0's clean shutdown (torchrun status {code})", code)
