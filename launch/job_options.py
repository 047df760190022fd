"""The job options of `run --gpus N` (ranks, tensor parallelism, torchrun's rendezvous, a dry run), declared once: each
field's default is its flag's, its metadata the flag (`option_fields`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..option_fields import flag
from .torchrun import TorchrunSpec

JOB = "Job (torchrun)"
RDZV_BACKENDS = ("c10d", "static", "etcd", "etcd-v2")


@dataclass(frozen=True)
class JobOptions:
    gpus: int = field(
        default=1,
        metadata=flag(
            "--gpus",
            min=1,
            group=JOB,
            help="Ranks per node: >1 starts a torchrun job (CPU ranks over gloo when there is no CUDA).",
        ),
    )
    tp: int | None = field(
        default=None,
        metadata=flag(
            "--tp",
            min=1,
            group=JOB,
            help="Tensor-parallel size (default: the largest that divides --gpus and the model's heads; "
            "the other ranks "
            "are data-parallel replicas).",
        ),
    )
    nnodes: int = field(default=1, metadata=flag("--nnodes", min=1, group=JOB, help="Nodes (passed to torchrun)."))
    node_rank: int | None = field(
        default=None, metadata=flag("--node-rank", min=0, group=JOB, help="This node's rank (passed to torchrun).")
    )
    rdzv_endpoint: str | None = field(
        default=None, metadata=flag("--rdzv-endpoint", group=JOB, help="host:port (passed to torchrun).")
    )
    rdzv_backend: str | None = field(
        default=None,
        metadata=flag(
            "--rdzv-backend",
            group=JOB,
            choices=lambda: RDZV_BACKENDS,
            help="c10d | static | etcd | etcd-v2 (passed to torchrun).",
        ),
    )
    dry_run: bool = field(
        default=False,
        metadata=flag("--dry-run", group=JOB, help="Print the torchrun command and the rank mapping; start nothing."),
    )
    rank_timeout_s: float = field(
        default=600.0,
        metadata=flag(
            "--rank-timeout",
            min=1.0,
            group=JOB,
            param="rank_timeout",
            help="Seconds a collective may wait for a rank before failing.",
        ),
    )

    @property
    def is_job(self) -> bool:
        """A torchrun job (more than one rank, or a dry run of one), not this process."""
        return self.gpus > 1 or self.nnodes > 1 or self.dry_run

    @property
    def world_size(self) -> int:
        return self.gpus * self.nnodes

    def torchrun(self) -> TorchrunSpec:
        return TorchrunSpec(self.gpus, self.nnodes, self.node_rank, self.rdzv_endpoint, self.rdzv_backend)
