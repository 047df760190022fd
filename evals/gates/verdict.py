"""A run's summary judged: each task's numbers summarised from the evaluation (`summarise`), then every gate of the
registry that applies to the run (`apply_gates`); the run's verdict then follows from them and the failing events
(`RunSummary`)."""

from __future__ import annotations

from collections.abc import Mapping

from ...peers.server.failure import server_failure_line
from ...results.run_summary import RunSummary, TaskSummary
from ...results.sample_record import SampleRecord
from ...workers.events import count_events, failing_events
from ...workers.interface import EngineIdentity
from ..run_types import TaskResult
from .gate import RunEvidence
from .registry import judge_run
from .resolved_run import ResolvedRun


def summarise(results: list[TaskResult], identity: EngineIdentity, events: list[dict], elapsed_s: float) -> RunSummary:
    """The run's summary before its gates: each task's numbers, the event counts, and why a server failed the run
    when its events say so (an endpoint run: a stall, a fatal log line, a leak)."""
    tasks = {r.task: _task_summary(r) for r in results}
    return RunSummary(
        tasks=tasks,
        events=count_events(events),
        failing_events=len(failing_events(events)),
        elapsed_s=round(elapsed_s, 1),
        model=identity.model,
        kv_cache=identity.kv_cache,
        spec=identity.spec,
        world_size=identity.world_size,
        server_failure=server_failure_line(events),
    )


def apply_gates(
    summary: RunSummary, results: list[TaskResult], samples: list[SampleRecord], run: ResolvedRun
) -> RunSummary:
    """The summary judged by every gate that applies to this run (`registry`)."""
    return judge_run(summary, RunEvidence(tuple(results), tuple(samples), summary), run)


def _task_summary(r: TaskResult) -> TaskSummary:
    """A task's numbers; its accuracy test's fields are the accuracy gate's to write (`accuracy_gate`)."""
    return TaskSummary(
        num_samples=r.num_samples,
        score=round(r.score, 4),
        filter_scores={k: round(v, 4) for k, v in r.filter_scores.items()},
        reference=r.reference.accuracy if r.reference else None,
        num_failed_requests=r.num_failed_requests,
        acceptance=r.acceptance,
        data=r.data_origin,
        n_total=r.n_total,
        subset={k: v for k, v in r.subset.items() if k != "order"} if r.subset else None,
        stopped=r.stopped or None,
        filter_mismatches=r.filter_mismatches,
        extra=_extra(r),
    )


def _extra(r: TaskResult) -> Mapping[str, object]:
    return {k: v for k, v in (("conditions", r.conditions), ("clustered", r.clustered)) if v is not None}
