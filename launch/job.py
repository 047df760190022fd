"""`specdec-eval run` as a job: the launcher side (build and start torchrun, read the verdict back) and the rank
side (join the process group, build this rank's engine, drive or serve)."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..workers.errors import UserError
from .layout import Layout, plan_layout
from .torchrun import TorchrunSpec, start

RESULT_FILE_ENV = "SPECDEC_EVAL_RESULT_FILE"  # where rank 0 leaves the summary for the launcher


def in_torchrun_job() -> bool:
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


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
            + (" (drives the evaluation)" if rank == 0 else "")
        )
    return lines


def launch(spec: TorchrunSpec, layout: Layout, device: str, dry_run: bool) -> dict[str, Any] | None:
    """Start the job and wait; returns rank 0's summary, or None for a dry run. A failed job raises JobFailed."""
    backend = "NCCL" if device == "cuda" else "gloo"
    what = "GPU" if device == "cuda" else "CPU"
    note = "" if device == "cuda" else " (no CUDA here: the same job runs as CPU ranks)"
    print(f"{layout.world_size} {what} ranks over {backend}: {layout.describe()}{note}", file=sys.stderr)
    if dry_run:
        print(spec.display())
        for line in describe_ranks(layout, spec.nproc_per_node):
            print("  " + line)
        return None
    with tempfile.TemporaryDirectory(prefix="specdec-job-") as tmp:
        result_file = Path(tmp) / "summary.json"
        os.environ[RESULT_FILE_ENV] = str(result_file)
        try:
            code, failures = start(spec)
        finally:
            os.environ.pop(RESULT_FILE_ENV, None)
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


def rank_main(
    config_for: Callable[[int], Any],
    num_heads: int,
    num_kv_heads: int,
    tp: int | None,
    device: str,
    drive: Callable[[Any], dict[str, Any]],
    timeout_s: float,
    checkpoint: Any = None,
) -> dict[str, Any] | None:
    """One rank of the job. config_for(tp_size) gives the engine config; drive(engine) runs the evaluation on rank
    0 and returns its summary, which is also left in the launcher's result file."""
    import torch.distributed as dist

    from ..workers.engine import Engine
    from .dispatch import ShardedEngine, init_world, serve_forever

    world = init_world(device, lambda n: plan_layout(n, num_heads, num_kv_heads, tp), timeout_s)
    try:
        engine = Engine(config_for(world.layout.tp), world.tp, checkpoint)
        if world.rank != 0:
            serve_forever(engine, world)
            return None
        sharded = ShardedEngine(engine, world)
        try:
            summary = drive(sharded)
        finally:
            sharded.stop()
        path = os.environ.get(RESULT_FILE_ENV)
        if path:
            Path(path).write_text(json.dumps(summary), encoding="utf-8")
        return summary
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
