"""The torchrun backend: a run on our engine sharded over the ranks of a torchrun job (launch/), and its driver.

`TorchrunBackend.run` is the launcher's side: it lays out TP x DP over the ranks, runs the non-speculative
baseline as a job of its own first when none is recorded, then the run as a job whose rank 0 calls `job_driver`
(named in the job file; launch/rank_main.py loads it) with a ShardedEngine over every replica. A job never pairs:
paired twins are a baseline only once audited on an engine with no spec worker, and a job's ranks hold one sharded
engine, the spec-dec one. A failed job raises launch.job.JobFailed, whose code is the job's exit status."""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from typing import Any

from ...errors import UserError
from ...launch.torchrun import TorchrunSpec
from ...results.run_summary import RunSummary
from ...workers.config import EngineConfig
from .backends import ProgressFor
from .orchestration import (
    RunPlan,
    baseline_config,
    check_named_baseline,
    needs_baseline,
    pairs_with_baseline,
    run_evaluation,
)

JOB_DRIVER = "specdec_eval.evals.pipeline.backend_torchrun:job_driver"


@dataclass(frozen=True)
class TorchrunBackend:
    config: EngineConfig
    torchrun: TorchrunSpec
    tp: int | None = None  # None: the largest TP that divides the ranks and the model's heads
    rank_timeout_s: float = 600.0
    baseline: str = "paired"  # as asked; a job runs a missing baseline separately either way (it says so)
    dry_run: bool = False  # print the torchrun command, the rank map and the job; start nothing

    def run(self, plan: RunPlan, progress_for: ProgressFor | None = None) -> RunSummary | None:
        """Rank 0's summary (None for a dry run), sent back as JSON.
        Progress is rank 0's own (plain lines on the job's stderr)."""
        from ...launch.job import Job, launch, resolve_job_device
        from ...launch.layout import plan_layout
        from ...workers.loading.checkpoint import load_checkpoint

        torchrun = self.torchrun
        device = resolve_job_device(self.config.device, torchrun.nproc_per_node)
        cfg = load_checkpoint(self.config.model).config
        layout = plan_layout(torchrun.nproc_per_node * torchrun.nnodes, cfg.num_attention_heads,
                             cfg.num_key_value_heads, self.tp)  # fmt: skip
        if layout.tp > torchrun.nproc_per_node:
            raise UserError(f"TP {layout.tp} would span nodes; use --tp <= --gpus ({torchrun.nproc_per_node})")
        config = replace(self.config, tp_size=layout.tp, device=device)
        check_named_baseline(config, plan)
        if not self.dry_run and pairs_with_baseline(config, plan, self.baseline):
            print("lossless gate: a torchrun job cannot audit paired twins; its baseline is a separate job",
                  file=sys.stderr)  # fmt: skip
        payload = plan.to_dict()
        if not self.dry_run and needs_baseline(config, plan):
            print("lossless gate: running the non-speculative baseline job first", file=sys.stderr)
            base = Job(JOB_DRIVER, baseline_config(config), layout.tp, payload, self.rank_timeout_s)
            launch(base, torchrun, layout, device, dry_run=False)
        job = Job(JOB_DRIVER, config, layout.tp, payload, self.rank_timeout_s)
        recorded = launch(job, torchrun, layout, device, self.dry_run)
        return None if recorded is None else RunSummary.from_json(recorded)


def job_driver(engine, payload: dict[str, Any]) -> dict[str, Any]:
    """Rank 0 of a torchrun job (launch/rank_main.py): one run on the sharded engine. Its stderr is torchrun's pipe,
    never a terminal, so progress is a plain line now and then."""
    from .backend_progress import plain_progress

    return run_evaluation(engine, RunPlan.from_dict(payload), plain_progress()).to_json()
