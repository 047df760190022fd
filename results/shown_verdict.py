"""A run's verdict as every reader shows it (the report, the runs table, `decide`): PASS only where a gate that could
have failed passed.

summary.json records PASS for any run that did not FAIL, including one no gate could fail (e.g. a non-speculative
baseline without an accuracy reference). Calling that PASS reads as evidence; it is NO-GATE. A PASS needs at least
one task whose accuracy gate (threshold above the floor), lossless gate or acceptance gate passed. The rule lives
on the typed summary (`TaskSummary.gates_passed`, `RunSummary.shown_verdict`); these are its entry points for
summary.json's objects.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .run_summary import FAIL, NO_GATE, PASS, GateResult, RunSummary, TaskSummary, as_run_summary

__all__ = [
    "FAIL",
    "NO_GATE",
    "PASS",
    "UNDERPOWERED",
    "gate_words",
    "gates_passed",
    "run_verdict",
    "verdict_words",
]

# What readers say beside an acceptance PASS whose band's floor lies below min_al (`acceptance_power`)
UNDERPOWERED = "band wider than min_al: does not rule out a drop to min_al"


def gates_passed(task: TaskSummary | Mapping[str, Any]) -> list[str]:
    """The gates with the power to fail that passed this task: accuracy, lossless, acceptance."""
    return (task if isinstance(task, TaskSummary) else TaskSummary.from_json(task)).gates_passed()


def run_verdict(summary: RunSummary | Mapping[str, Any]) -> str:
    """The summary's verdict, except that a PASS no gate could have failed is NO-GATE, and so is a PASS whose lossless
    gate could not judge (UNCALIBRATED)."""
    return as_run_summary(summary).shown_verdict


def gate_words(result: GateResult | None) -> str | None:
    """Any gate's verdict as readers print it: a PASS that does not rule out its regression is never bare."""
    return verdict_words(result.verdict, result.underpowered) if result is not None else None


def verdict_words(verdict: str | None, underpowered: bool) -> str | None:
    """A gate's verdict word as readers print it: an underpowered PASS (the acceptance gate's within a band wider
    than min_al) is never bare."""
    if verdict is None:
        return None
    return f"{verdict} ({UNDERPOWERED})" if underpowered and verdict == PASS else verdict
