"""Rank plumbing in one place: read torchrun's environment and start the process group."""

from __future__ import annotations

import contextlib
import datetime
import os
from collections.abc import Iterator

import torch
import torch.distributed as dist

from ..workers.parallel import TPGroup


def world_size_from_env() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def local_rank_from_env() -> int:
    return int(os.environ.get("LOCAL_RANK", "0"))


def init_tp_group(device_type: str, timeout_s: float = 300.0) -> TPGroup:
    """Start the default process group when launched by torchrun (NCCL on CUDA, gloo on CPU) and return the
    whole world as one TP group. A single process gets the trivial group and no torch.distributed at all."""
    if world_size_from_env() == 1:
        return TPGroup()
    if not dist.is_initialized():
        backend = "nccl" if device_type == "cuda" else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(local_rank_from_env())
        dist.init_process_group(backend=backend, timeout=datetime.timedelta(seconds=timeout_s))
    return TPGroup.from_default_group()


def shutdown_tp_group() -> None:
    """Leave the process group cleanly. A gloo group left alive at interpreter exit can abort the process
    ("terminate called without an active exception") while its background threads are torn down."""
    if dist.is_initialized():
        dist.destroy_process_group()


@contextlib.contextmanager
def tp_session(device_type: str, timeout_s: float = 300.0) -> Iterator[TPGroup]:
    """init_tp_group for the duration of a block, always followed by shutdown_tp_group."""
    try:
        yield init_tp_group(device_type, timeout_s)
    finally:
        shutdown_tp_group()
