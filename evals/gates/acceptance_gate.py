"""The acceptance-length gate over a run: each spec-dec task's acceptance length against the entry of its decoding
(`acceptance.acceptance_gate` judges one), the reference first written from this run when --populate-acceptance asks
(from a clean, passing run only: `acceptance_file.populate_from_run`)."""

from __future__ import annotations

from ...gates.acceptance import GATE as ACCEPTANCE
from ...results.run_summary import GateResult, RunSummary, TaskSummary
from ...results.shown_verdict import gate_words
from ..run_types import TaskResult
from .acceptance import acceptance_gate, reference_id
from .acceptance_file import load_acceptance_references, populate_from_run
from .gate import Gate, GateOutcome, RunEvidence
from .resolved_run import ResolvedRun


class AcceptanceGate(Gate):
    declaration = ACCEPTANCE

    def applies(self, run: ResolvedRun) -> bool:
        return run.spec_dec

    def judge(self, evidence: RunEvidence, run: ResolvedRun) -> GateOutcome:
        options, results = run.plan.options, list(evidence.results)
        populated = {}
        if run.plan.populate_acceptance:
            record = populate_from_run(evidence.summary, results, run.test_id, run.acceptance_path, run.spec_sampling)
            populated = {"acceptance_populated": record}
        # --no-reference: the shipped references are not looked up, for acceptance either (a run at other shots or
        # lengths than a reference's is no regression of it: a clean SmolLM2 run at 0 shots and 16 tokens FAILed
        # against the 5-shot AL 2.0); a file named with --acceptance-refs still is
        skip = options.no_reference and not options.acceptance_refs
        refs = {} if skip else load_acceptance_references(run.acceptance_path)
        tasks = evaluate_acceptance(results, run.test_id, refs, options.acceptance_rtol, run.spec_sampling)
        return GateOutcome(tasks, populated)

    def report_lines(self, task: TaskSummary) -> list[str]:
        """The run's acceptance counters (measured whether or not a reference judged them), then the verdict."""
        lines = []
        if task.acceptance:
            a = task.acceptance
            per_pos = ", ".join(f"{x:.2f}" for x in a["per_position_rate"])
            lines.append(
                f"acceptance length {a['acceptance_length']:.3f} (incl. bonus token), rate "
                f"{a['acceptance_rate']:.3f}, per position [{per_pos}]"
            )
        result = self.result(task)
        if result is not None:
            lines.append(f"acceptance gate: {gate_words(result)} ({result.reason})")
        return lines


GATE = AcceptanceGate()


def evaluate_acceptance(
    results: list[TaskResult], test_id: str, refs: dict, rtol: float, spec_sampling: str | None = None
) -> dict[str, GateResult]:
    """Each spec-dec task's acceptance length against its reference (`acceptance`): the entry of the
    task's decoding (`reference_id`: a sampled task's is keyed by its temperature, filters and spec sampler), which
    applies to the tasks it names (`task:`), or to every task when it names none."""
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
        summary = summary.with_task_gate(task, GATE.key, gate)
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
