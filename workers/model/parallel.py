"""The tensor-parallel group a model is sharded over. Collectives are explicit calls, never hidden in hooks.

`launch/` creates the process group (gloo on CPU, NCCL on CUDA); the engine only receives this small handle, so
a single-process engine needs no torch.distributed at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class TPGroup:
    rank: int = 0
    size: int = 1
    group: Any = None  # torch.distributed ProcessGroup; None means the default group
    src_rank: int = 0  # global rank of this group's rank 0 (the one that decides and broadcasts)
    global_rank: int | None = None  # this process's rank in the whole job (None: same as rank)

    @classmethod
    def from_default_group(cls) -> TPGroup:
        """The whole world as one TP group (what `torchrun --nproc-per-node N` with TP=N gives)."""
        if not (dist.is_available() and dist.is_initialized()):
            return cls()
        return cls(rank=dist.get_rank(), size=dist.get_world_size())

    @property
    def job_rank(self) -> int:
        """This process's rank in the whole job: what events and logs are labelled with."""
        return self.rank if self.global_rank is None else self.global_rank

    @property
    def is_leader(self) -> bool:
        return self.rank == 0

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        """Sum partial results in place (row-parallel linears)."""
        if self.size > 1:
            dist.all_reduce(x, group=self.group)
        return x

    def all_gather_last_dim(self, x: torch.Tensor) -> torch.Tensor:
        """Concatenate each rank's shard along the last dimension (vocab-parallel logits)."""
        if self.size == 1:
            return x
        parts = [torch.empty_like(x) for _ in range(self.size)]
        dist.all_gather(parts, x.contiguous(), group=self.group)
        return torch.cat(parts, dim=-1)

    def barrier(self) -> None:
        if self.size > 1:
            dist.barrier(group=self.group)

    def broadcast(self, x: torch.Tensor) -> torch.Tensor:
        """Make every rank hold rank 0's decision (sampled tokens, accepted lengths)."""
        if self.size > 1:
            dist.broadcast(x, src=self.src_rank, group=self.group)
        return x
