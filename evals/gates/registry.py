"""Every gate's judging half, in the order a run is judged by them (the accuracy test, then the lossless gate, whose
verdict the acceptance reference's populate reads, then the acceptance gate, then the opt-in gates): the order and
the judging module (`GATE`) of each are its declaration's (`specdec_eval.gates`), so nothing is listed twice."""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Iterable, Mapping
from functools import cache

from ...errors import UserError
from ...gates import declarations
from ...results.run_summary import RunSummary
from .gate import Gate, GateOutcome, RunEvidence
from .resolved_run import ResolvedRun


@cache
def gates() -> tuple[Gate, ...]:
    return tuple(importlib.import_module(f"{__package__}.{d.judged_in}").GATE for d in declarations())


def gate_named(name: str) -> Gate:
    found = next((g for g in gates() if g.name == name), None)
    if found is None:
        raise UserError(f"unknown gate {name!r}; known: {', '.join(g.name for g in gates())}")
    return found


def opt_in_gates() -> tuple[Gate, ...]:
    return tuple(g for g in gates() if g.opt_in)


def parse_opt_in(given: Iterable[str]) -> dict[str, str | None]:
    """`--gate NAME[=SETTING]` (repeatable, or comma-separated) as {name: setting}; UserError naming the opt-in gates
    for an unknown name or a setting its gate does not take."""
    chosen: dict[str, str | None] = {}
    known = ", ".join(g.name for g in opt_in_gates())
    for spec in (s.strip() for text in given for s in text.split(",")):
        name, _, setting = spec.partition("=")
        gate = next((g for g in opt_in_gates() if g.name == name), None)
        if gate is None:
            raise UserError(f"--gate {spec}: no opt-in gate {name!r}; known: {known}")
        gate.check_setting(setting if "=" in spec else None)
        chosen[name] = setting if "=" in spec else None
    return chosen


def judge_run(summary: RunSummary, evidence: RunEvidence, run: ResolvedRun) -> RunSummary:
    """The summary judged by every gate that applies to the run, in order; each reads the summary the gates before
    it left (the run's verdict then follows from them: RunSummary.verdict)."""
    for gate in gates():
        if gate.applies(run):
            outcome = gate.judge(dataclasses.replace(evidence, summary=summary), run)
            summary = record(summary, gate, outcome)
    return summary


def record(summary: RunSummary, gate: Gate, outcome: GateOutcome) -> RunSummary:
    """The summary with a gate's outcome: each task's result under the gate's key (the accuracy test's as the task
    entry's own verdict), and its run-level records."""
    for task, result in outcome.tasks.items():
        if gate.key is None:
            summary = summary.with_task_accuracy(task, result)
        else:
            summary = summary.with_task_gate(task, gate.key, result)
    return summary.replace(**outcome.run) if outcome.run else summary


def gate_keys() -> Mapping[str, str]:
    """Each recorded gate's name by its summary.json key (what readers of a run folder label it with)."""
    return {g.key: g.name for g in gates() if g.key is not None}
