"""`specdec-eval run --gpus N` (and `serve --gpus N`) as a torchrun job, the launcher side: write the job file that
every rank reads, start torchrun with an explicit environment, and read rank 0's result back.

A job is data, not an argv to rebuild: the engine configuration, the TP size, and a driver (`module:function`)
that rank 0 calls with its `ShardedEngine` and the job's payload. Drivers are library code beside what they drive
(the torchrun backend for `run`, the server's job driver for `serve`), never the CLI: launch imports neither
and calls back into no command. Each rank enters through `rank_main`."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..workers.config import EngineConfig
from .job_options import JobOptions
from .layout import Layout
from .torchrun import TorchrunSpec, start


@dataclass
class Job:
    driver: str  # "module:function" of a library module, called on rank 0 as function(engine, payload) -> dict
    engine: EngineConfig  # tp_size is set per rank from the layout
    tp: int
    payload: dict[str, Any] = field(default_factory=dict)
    rank_timeout_s: float = JobOptions.rank_timeout_s
    # "batch": rank 0 gets a ShardedEngine (generate/score calls); "serving": a ShardedServingEngine driven one
    # step at a time by a server (`serving`). The other ranks run the matching loop.
    mode: str = "batch"

    def to_json(self, result_file: str | None) -> str:
        return json.dumps(
            {
                "driver": self.driver,
                "engine": self.engine.to_dict(),
                "tp": self.tp,
                "payload": self.payload,
                "rank_timeout_s": self.rank_timeout_s,
                "mode": self.mode,
                "result_file": result_file,
            }
        )

    @classmethod
    def from_json(cls, text: str) -> tuple[Job, str | None]:
        d = json.loads(text)
        engine = EngineConfig.from_dict(d["engine"])
        job = cls(d["driver"], engine, d["tp"], d["payload"], d["rank_timeout_s"], d.get("mode", "batch"))
        return job, d.get("result_file")


def resolve_job_device(device: str, gpus: int) -> str:
    """auto -> cuda when CUDA is there, else cpu. An explicit cuda without CUDA (or too few GPUs) is an error."""
    import torch

    has_cuda = torch.cuda.is_available()
    if device == "cuda" and not has_cuda:
        raise UserError("--device cuda, but this machine has no CUDA device (use --device cpu or auto)")
    resolved = "cuda" if device == "cuda" or (device == "auto" and has_cuda) else "cpu"
    if resolved == "cuda" and gpus > torch.cuda.device_count():
        raise UserError(f"--gpus {gpus}, but this node has {torch.cuda.device_count()} CUDA devices")
    return resolved


def describe_ranks(layout: Layout, nproc_per_node: int) -> list[str]:
    lines = []
    for rank in range(layout.world_size):
        group = layout.tp_group_of(rank)
        lines.append(
            f"rank {rank}: node {rank // nproc_per_node} local rank {rank % nproc_per_node}, "
            f"replica {layout.dp_index_of(rank)}, TP rank {group.index(rank)} of ranks {','.join(map(str, group))}"
            + (" (drives the job)" if rank == 0 else "")
        )
    return lines


def launch(job: Job, spec: TorchrunSpec, layout: Layout, device: str, dry_run: bool) -> dict[str, Any] | None:
    """Start the job and wait; returns rank 0's result, or None for a dry run. A failed job raises JobFailed."""
    backend = "NCCL" if device == "cuda" else "gloo"
    what = "GPU" if device == "cuda" else "CPU"
    note = "" if device == "cuda" else " (no CUDA here: the same job runs as CPU ranks)"
    print(f"{layout.world_size} {what} ranks over {backend}: {layout.describe()}{note}", file=sys.stderr)
    if dry_run:
        print(spec.display())
        for line in describe_ranks(layout, spec.nproc_per_node):
            print("  " + line)
        print(f"{spec.job_file}: {job.to_json(None)}")
        return None
    with tempfile.TemporaryDirectory(prefix="specdec-job-") as tmp:
        result_file = Path(tmp) / "result.json"
        job_file = Path(tmp) / "job.json"
        job_file.write_text(job.to_json(str(result_file)), encoding="utf-8")
        spec.job_file = str(job_file)
        code, failures = start(spec, dict(os.environ))
        if code != 0:
            if failures:
                raise JobFailed("; ".join(f.describe() for f in failures), code)
            raise JobFailed(f"torchrun exited with status {code}", code)
        if not result_file.exists():
            raise JobFailed("the job ended without rank 0's results", 1)
        return json.loads(result_file.read_text(encoding="utf-8"))


class JobFailed(Exception):
    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code or 1
