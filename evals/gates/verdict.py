"""The gates a run's summary is judged by, in one place (`apply_gates`: a new gate is one more call there): each
task's accuracy test (summarised from the evaluation), the lossless gate and the acceptance
gate; the run's verdict then follows from them and the failing events (`RunSummary`)."""

from __future__ import annotations

from pathlib import Path

from ...peers.server.failure import server_failure_line
from ...results.run_summary import GateResult, RunSummary, TaskSummary
from ...results.sample_record import SampleRecord
from ...workers.events import count_events, failing_events
from ...workers.interface import EngineIdentity
from ..lossless.baseline import ResolvedBaseline
from ..lossless.gate import apply_lossless_gate
from ..lossless.scoring import spec_sampling as spec_sampling_of
from ..run_types import EvalOptions, RunPlan, TaskResult


def summarise(results: list[TaskResult], identity: EngineIdentity, events: list[dict], elapsed_s: float) -> RunSummary:
    """The run's summary before the lossless and acceptance gates: each task's accuracy test, the event counts, and
    why a server failed the run when its events say so (an endpoint run: a stall, a fatal log line, a leak)."""
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
    summary: RunSummary,
    results: list[TaskResult],
    samples: list[SampleRecord],
    identity: EngineIdentity,
    plan: RunPlan,
    baseline: ResolvedBaseline,
    test_id: str,
) -> RunSummary:
    """The summary judged by every gate a run of this engine has beyond its tasks' accuracy tests: a spec-dec run's
    lossless gate against `baseline`, then its acceptance gate (its reference first written from this run when
    --populate-acceptance asks, from a clean, passing run only)."""
    if identity.spec is None:
        return summary
    summary = apply_lossless_gate(summary, samples, identity, results, baseline)
    path = acceptance_path(plan.options)
    spec_sampling = spec_sampling_of(identity)
    if plan.populate_acceptance:
        summary = populate_acceptance(summary, results, test_id, path, spec_sampling)
    from .acceptance import load_acceptance_references

    # --no-reference: the shipped references are not looked up, for acceptance either (a run at other shots or
    # lengths than a reference's is no regression of it: a clean SmolLM2 run at 0 shots and 16 tokens FAILed against
    # the 5-shot AL 2.0); a file named with --acceptance-refs still is
    skip = plan.options.no_reference and not plan.options.acceptance_refs
    refs = {} if skip else load_acceptance_references(path)
    return apply_acceptance_gate(summary, results, test_id, refs, plan.options.acceptance_rtol, spec_sampling)


def _task_summary(r: TaskResult) -> TaskSummary:
    return TaskSummary(
        num_samples=r.num_samples,
        score=round(r.score, 4),
        filter_scores={k: round(v, 4) for k, v in r.filter_scores.items()},
        reference=r.reference.accuracy if r.reference else None,
        threshold=_rounded(r.accuracy.numbers.get("threshold")),
        theta=_rounded(r.accuracy.numbers.get("theta")),
        verdict=r.accuracy.verdict,
        num_failed_requests=r.num_failed_requests,
        acceptance=r.acceptance,
        data=r.data_origin,
        n_total=r.n_total,
        subset={k: v for k, v in r.subset.items() if k != "order"} if r.subset else None,
        stopped=r.stopped or None,
        report=r.accuracy.reason,
        filter_mismatches=r.filter_mismatches,
        extra={k: v for k, v in (("conditions", r.conditions), ("clustered", r.clustered)) if v is not None},
    )


def acceptance_path(options: EvalOptions) -> Path:
    """The acceptance-length references file of a run: --acceptance-refs, else the shipped one."""
    from .acceptance import ACCEPTANCE_PATH

    return Path(options.acceptance_refs) if options.acceptance_refs else ACCEPTANCE_PATH


def _rounded(x: float | None) -> float | None:
    return round(x, 4) if x is not None else None


def evaluate_acceptance(
    results: list[TaskResult], test_id: str, refs: dict, rtol: float, spec_sampling: str | None = None
) -> dict[str, GateResult]:
    """Each spec-dec task's acceptance length against its reference (`acceptance`): the entry of the
    task's decoding (`reference_id`: a sampled task's is keyed by its temperature, filters and spec sampler), which
    applies to the tasks it names (`task:`), or to every task when it names none."""
    from .acceptance import acceptance_gate, reference_id

    gates = {}
    for r in results:
        key = reference_id(test_id, getattr(r, "conditions", None), spec_sampling)
        entry = refs.get(key) or {}
        if not r.acceptance or entry.get("task") not in (None, r.task):
            continue
        positions = [
            acceptance_slack([(c, accepted[i]) for c, accepted in r.acceptance_positions])
            for i in range(len(r.acceptance.get("accepted_per_position") or []))
        ]
        slack = acceptance_slack(r.acceptance_requests)
        temperature = float((getattr(r, "conditions", None) or {}).get("temperature") or 0.0)  # what it decoded at
        gates[r.task] = GateResult.from_json(
            acceptance_gate(key, r.acceptance, refs, rtol, slack, positions, temperature)
        )
    return gates


def apply_acceptance_gate(
    summary: RunSummary,
    results: list[TaskResult],
    test_id: str,
    refs: dict,
    rtol: float,
    spec_sampling: str | None = None,
) -> RunSummary:
    """The summary with each task's acceptance gate recorded (a FAIL fails the run: RunSummary.verdict)."""
    for task, gate in evaluate_acceptance(results, test_id, refs, rtol, spec_sampling).items():
        summary = summary.with_task_gate(task, "acceptance_gate", gate)
    return summary


def acceptance_slack(requests: list[tuple[int, int]], z: float = 2.576) -> float:
    """The run's own sampling error of its acceptance length, z standard errors. AL = 1 + sum(accepted) /
    sum(cycles) is a ratio over requests (a request's cycles are not independent, requests are), and long requests
    weigh more, so its standard error is the ratio estimator's (delta method): with r = sum(a) / sum(c),
    SE = sqrt(sum((a_i - r c_i)^2) / (n (n - 1))) / mean(c). The unweighted standard error of per-request ALs
    understated it (a seeded random 32 GSM8K questions measured AL 1.748 against 1.999 for the 100 around them).
    With (cycles, drafts accepted at position i) per request, the same for position i's rate."""
    requests = [(c, a) for c, a in requests if c > 0]
    n = len(requests)
    if n < 2:
        return 0.0
    cycles = sum(c for c, _ in requests)
    ratio = sum(a for _, a in requests) / cycles
    residual = sum((a - ratio * c) ** 2 for c, a in requests)
    return z * (residual / (n * (n - 1))) ** 0.5 / (cycles / n)


def populate_acceptance(
    summary: RunSummary, results: list[TaskResult], test_id: str, path, spec_sampling: str | None = None
) -> RunSummary:
    """`--populate-acceptance`: the run's acceptance length as its test id's reference, only from a clean, passing
    run (`acceptance.populate_from_run`); called after the lossless gate, before the acceptance gate."""
    from .acceptance import populate_from_run

    return summary.replace(acceptance_populated=populate_from_run(summary, results, test_id, path, spec_sampling))
