"""Rank plumbing in one place: torchrun's environment is read once (`RankEnv`), and one function starts the
process groups (`init_world`): the default group (NCCL on CUDA, gloo on CPU), one TP group per replica, and a gloo
control group. Everything else receives these values; nothing below launch/ reads the environment."""

from __future__ import annotations

import contextlib
import datetime
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from ..workers.model.parallel import TPGroup
from .layout import Layout


@dataclass(frozen=True)
class RankEnv:
    """What torchrun tells a rank about itself."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> RankEnv:
        env = os.environ if environ is None else environ
        return cls(int(env.get("RANK", "0")), int(env.get("WORLD_SIZE", "1")), int(env.get("LOCAL_RANK", "0")))

    @property
    def in_job(self) -> bool:
        """This process is one rank of a multi-process job."""
        return self.world_size > 1


@dataclass
class World:
    rank: int
    layout: Layout
    tp: TPGroup
    control: Any  # gloo process group spanning every rank (None in a single process)

    @property
    def dp_index(self) -> int:
        return self.layout.dp_index_of(self.rank)

    @property
    def is_replica_leader(self) -> bool:
        return self.tp.is_leader


def init_world(env: RankEnv, device_type: str, layout: Layout, timeout_s: float = 300.0) -> World:
    """Start every group, in the same order on every rank, as torch.distributed requires. A single process gets
    the trivial world and no torch.distributed at all."""
    if not env.in_job:
        return World(0, layout, TPGroup(), None)
    backend = "nccl" if device_type == "cuda" else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(env.local_rank)  # the engine then takes the current CUDA device
    timeout = datetime.timedelta(seconds=timeout_s)
    # The rendezvous address (MASTER_ADDR / MASTER_PORT) is torchrun's business; who we are is RankEnv's.
    dist.init_process_group(backend=backend, rank=env.rank, world_size=env.world_size, timeout=timeout)
    rank = env.rank
    groups = [dist.new_group(layout.tp_group_of(d * layout.tp), timeout=timeout) for d in range(layout.dp)]
    mine = layout.tp_group_of(rank)
    tp = TPGroup(
        rank=mine.index(rank),
        size=layout.tp,
        group=groups[layout.dp_index_of(rank)],
        src_rank=mine[0],
        global_rank=rank,
    )
    control = dist.new_group(backend="gloo", timeout=timeout) if backend == "nccl" else dist.group.WORLD
    return World(rank, layout, tp, control)


def shutdown_world() -> None:
    """Leave the process group cleanly. A gloo group left alive at interpreter exit can abort the process
    ("terminate called without an active exception") while its background threads are torn down."""
    if dist.is_initialized():
        dist.destroy_process_group()


@contextlib.contextmanager
def world_session(env: RankEnv, device_type: str, layout: Layout, timeout_s: float = 300.0) -> Iterator[World]:
    """init_world for the duration of a block, always followed by shutdown_world."""
    try:
        yield init_world(env, device_type, layout, timeout_s)
    finally:
        shutdown_world()
