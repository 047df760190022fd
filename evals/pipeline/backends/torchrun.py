"""The torchrun backend: our engine sharded over the ranks of a torchrun job, and the job's driver.

Each side of a run (the run, its plain baseline, its noise-floor control) is a job of its own: TP x DP laid out over
the ranks, every rank reading the same serialised job, rank 0 calling `job_driver` (named in
the job file) with a ShardedEngine over every replica, which evaluates the side as any backend does.
A job never pairs: paired twins are a baseline only once audited on an engine with no spec worker, and a job's ranks
hold one sharded engine, the spec-dec one. A failed job raises launch.job.JobFailed, whose code is the job's exit
status."""

from __future__ import annotations

from dataclasses import replace
from functools import cached_property
from typing import Any

from ....errors import UserError
from ....results.run_summary import RunSummary
from ....workers.config import EngineConfig
from ....workers.events import rank_events_path
from ....workers.interface import EngineIdentity
from ...lossless.baseline import BaselineRef
from ...lossless.control import other_shape
from ...lossless.scoring import Scorer
from ...run_identity import baseline_config
from ...run_types import RunPlan
from ..one_run import NO_BASELINE, ProgressFor, evaluate_side
from ..run_sides import RUN, Side, side_config, side_identity
from . import Abilities, RunTarget, refuse_baseline_endpoint

JOB_DRIVER = "specdec_eval.evals.pipeline.backends.torchrun:job_driver"
JOB_SCORER = "our plain engine on the job's ranks, on the target's weights (exact)"


class TorchrunBackend:
    def __init__(self, target: RunTarget) -> None:
        self.target = target
        self.job = target.job

    @property
    def dry_run(self) -> bool:
        return self.job.dry_run

    @cached_property
    def _placement(self) -> tuple[EngineConfig, Any, str]:
        """(the engine configuration of every rank, the TP x DP layout, the device); a layout that cannot be is a
        UserError (read from the checkpoint's header: its head counts)."""
        from ....launch.job import resolve_job_device
        from ....launch.layout import plan_layout
        from ....workers.loading.checkpoint import load_checkpoint

        job = self.job
        device = resolve_job_device(self.target.engine.device, job.gpus)
        cfg = load_checkpoint(self.target.engine.model).config
        layout = plan_layout(job.world_size, cfg.num_attention_heads, cfg.num_key_value_heads, job.tp)
        if layout.tp > job.gpus:
            raise UserError(f"TP {layout.tp} would span nodes; use --tp <= --gpus ({job.gpus})")
        events = rank_events_path(self.target.engine.events_path, job.world_size)
        config = replace(self.target.engine, tp_size=layout.tp, device=device, events_path=events)
        return config, layout, device

    @cached_property
    def abilities(self) -> Abilities:
        from ....workers.memory.device import dtype_name, resolve_device, resolve_dtype

        config, _, device = self._placement
        return Abilities(
            speculative=config.spec is not None,
            dtype=dtype_name(resolve_dtype(config.dtype, resolve_device(device))),
            plain_side=True,
            pairs=False,
            control_shape={"max_batch_size": other_shape(config.max_batch_size)},
            reuses_baseline=True,
            scores=True,
            why_not_paired="a torchrun job cannot audit paired twins; its baseline is a separate job",
        )

    def check_target(self) -> None:
        refuse_baseline_endpoint(self.target)

    def preflight(self, plan: RunPlan) -> None:
        from .local import check_draft_model

        check_draft_model(self.target.engine)
        self._placement  # noqa: B018  the layout's UserError, before anything starts

    def identity(self, side: Side) -> EngineIdentity:
        from ....workers.engine.engine import identity_of

        config, layout, _ = self._placement
        plain = identity_of(side_config(config, side))
        return side_identity(replace(plain, kind="torchrun", world_size=layout.world_size), side)

    def declared_identity(self) -> EngineIdentity:
        return self.identity(RUN)

    def evaluate(
        self, side: Side, plan: RunPlan, baseline: BaselineRef, progress_for: ProgressFor | None
    ) -> RunSummary:
        """Rank 0's summary, sent back as JSON. Progress is rank 0's own (plain lines on the job's stderr)."""
        recorded = self._launch(side, plan, baseline, dry_run=False)
        return RunSummary.from_json(recorded)

    def evaluate_paired(
        self, plan: RunPlan, control: str | None, progress_for: ProgressFor | None, score_sampled: bool = False
    ) -> RunSummary:
        raise RuntimeError("a torchrun job cannot pair: its twins could not be audited")

    def show(self, plan: RunPlan) -> None:
        self._launch(RUN, plan, NO_BASELINE, dry_run=True)

    def scorer(self) -> Scorer:
        """A stand-in that says "score": the gate runs on the job's rank 0, which builds the real scorer there (a
        plain engine beside the spec-dec one on every rank, `job_driver`); the payload carries only the wish."""

        def elsewhere() -> Any:
            raise RuntimeError("a torchrun run's outputs are scored inside its job (job_driver), not by the launcher")

        return Scorer(elsewhere, JOB_SCORER)

    def _launch(self, side: Side, plan: RunPlan, baseline: BaselineRef, dry_run: bool) -> dict[str, Any] | None:
        from ....launch.job import Job, launch

        config, layout, device = self._placement
        payload = {
            "plan": plan.to_dict(),
            "side": side.to_dict(),
            "baseline": baseline.to_dict(),
            "score_sampled": baseline.scorer is not None,
        }
        job = Job(JOB_DRIVER, side_config(config, side), layout.tp, payload, self.job.rank_timeout_s)
        return launch(job, self.job.torchrun(), layout, device, dry_run)


def job_driver(engine, payload: dict[str, Any]) -> dict[str, Any]:
    """Rank 0 of a torchrun job: one side of a run on the sharded engine. Its stderr is
    torchrun's pipe, never a terminal, so progress is a plain line now and then."""
    from contextlib import nullcontext

    from .progress import plain_progress

    side = Side.from_dict(payload["side"])
    baseline = BaselineRef.from_dict(payload["baseline"])
    plan = RunPlan.from_dict(payload["plan"])
    if payload.get("score_sampled"):
        baseline = replace(baseline, scorer=Scorer(lambda: _JobPlainScorer(engine), JOB_SCORER))
    return evaluate_side(engine, side, plan, baseline, lambda: nullcontext(plain_progress())).to_json()


class _JobPlainScorer:
    """What the sampled gate's Scorer builds inside a job: the job's sharded engine scoring on a plain sibling of
    every rank's engine (`dispatch.plain_sibling`); nothing to release after (the siblings are closed
    when the call returns)."""

    def __init__(self, sharded: Any) -> None:
        self.sharded = sharded
        self.config = baseline_config(sharded.config)

    @property
    def tokenizer(self) -> Any:
        return self.sharded.tokenizer

    def score_outputs(self, requests):
        return self.sharded.score_outputs_plain(self.config, requests)

    def close(self) -> None:
        pass
