"""A run's verdict as every reader shows it (the report, the runs table, `decide`): PASS only where a gate that could
have failed passed.

summary.json records PASS for any run that did not FAIL, including one on which no gate could fail: a
non-speculative baseline with no accuracy reference (REPORT) or below the accuracy floor (NO-GATE) has neither a
lossless nor an acceptance gate, so nothing it did could have failed it. Calling that PASS reads as evidence; it is
NO-GATE. A PASS needs at least one task whose accuracy gate (task verdict PASS: the threshold was above the
floor), lossless gate or acceptance gate passed.
"""

from __future__ import annotations

from typing import Any

PASS, FAIL, NO_GATE = "PASS", "FAIL", "NO-GATE"


def gates_passed(task: dict[str, Any]) -> list[str]:
    """The gates with the power to fail that passed this task's summary entry: accuracy, lossless, acceptance."""
    passed = []
    if task.get("verdict") == PASS:  # the hypothesis test says NO-GATE (or REPORT) where it cannot fail
        passed.append("accuracy")
    for gate in ("lossless", "acceptance_gate"):
        info = task.get(gate)
        if isinstance(info, dict) and info.get("verdict") == PASS:
            passed.append(gate.removesuffix("_gate"))
    return passed


def run_verdict(summary: dict[str, Any]) -> str:
    """The summary's verdict, except that a PASS no gate could have failed is NO-GATE, and so is a PASS whose lossless
    gate could not judge (UNCALIBRATED: divergences with neither margins nor a tolerance to weigh them by)."""
    verdict = summary.get("verdict")
    if verdict != PASS:
        return str(verdict)
    tasks = summary.get("tasks") or {}
    if any(lossless_uncalibrated(t) for t in tasks.values() if isinstance(t, dict)):
        return NO_GATE
    if any(gates_passed(t) for t in tasks.values() if isinstance(t, dict)):
        return PASS
    return NO_GATE


def lossless_uncalibrated(task: dict[str, Any]) -> bool:
    """The task's lossless gate could not judge its divergences (older runs said UNCALIBRATED, newer NO-GATE)."""
    info = task.get("lossless")
    return isinstance(info, dict) and (info.get("verdict") == "UNCALIBRATED" or bool(info.get("uncalibrated")))
