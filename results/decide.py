"""Recommend waive / unwaive / keep for one test from its recorded runs, and say why.

Rules, over the finished runs of the test id on the GPU (any GPU when gpu is None), newest first:

1. The newest run fails (verdict FAIL, a task verdict FAIL, a failed lossless or acceptance gate, or any
   spec_state_leak / request_failed event): "waive" unless already waived, then "keep". The signature quotes why
   it failed.
2. Else, when waived: "unwaive" if the k most recent runs all pass, otherwise "keep" (too few runs, or one of them
   failed). A run no gate could fail (shown verdict NO-GATE: e.g. a non-speculative run without an accuracy reference)
   is no evidence: it neither fails nor counts among the k, and the reason says it was left out. Within a run some other
   gate passed, NO-GATE and REPORT task verdicts count as passing (the reference gate did not fail), and the reason says
   so, because such a task did not prove the accuracy either. So does an acceptance gate that passed within a band wider
   than min_al: it counts as passing, and the reason says that it did not rule out a drop to min_al.
3. Else (passing and not waived): "keep".

Unreadable runs (a broken manifest, a summary cut off) are never skipped silently. One that may be a run of this test
(its manifest cannot be read, or says so) and is not older than the evidence a decision rests on turns an "unwaive" into
"keep": the run nobody can read may be the failure. They are listed in `Decision.unreadable` and named in the reason of
any decision they could change.

GPU scope: with a gpu, a waive covering every GPU (no `full:` prefix) counts as waived, but only lines written for
exactly that GPU are removed: a pass on one GPU does not lift a waive for every GPU. `apply_decision` writes and
removes lines for exactly `decision.gpu` (None: the line without `full:`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..gates import recorded
from .run_summary import Verdict
from .runs_table import FAILING_EVENTS, runs_table
from .shown_verdict import NO_GATE, PASS, UNDERPOWERED
from .store import Run, UnreadableRunError
from .waives import WaiveEntry, WaivesFile, edit_waives

WAIVE, UNWAIVE, KEEP = "waive", "unwaive", "keep"
PASSING_TASK_VERDICTS = (Verdict.PASS, Verdict.NO_GATE, Verdict.REPORT)
# A waive reason is free text in parentheses: brackets are dropped, anything else that might not read back as
# such (a '#' starts a comment, quotes, newlines) becomes a space.
_BRACKETS = str.maketrans("", "", "()[]{}")
_UNSAFE_REASON = re.compile(r"[^0-9A-Za-z .,:;=<>_+\-/'@%*]")


@dataclass
class Decision:
    test_id: str
    gpu: str | None
    action: str  # "waive" | "unwaive" | "keep"
    reason: str
    currently_waived: bool
    evidence: list[dict[str, Any]] = field(default_factory=list)
    signature: str | None = None  # why the newest run failed (for a waive)
    waive_lines: list[str] = field(default_factory=list)  # "line N: TEXT" of the waives that apply now
    unreadable: list[dict[str, Any]] = field(default_factory=list)  # runs that may be of this test but cannot be read

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def run_fails(row: dict[str, Any]) -> bool:
    """A run fails on its verdict, on any task verdict outside PASS / NO-GATE / REPORT, on a failed lossless gate,
    or on a failing event. A run no gate could fail (verdict NO-GATE) does not fail, and does not pass either
    (`run_passes`)."""
    if row["verdict"] not in (PASS, NO_GATE) or row["num_failing_events"]:
        return True
    return any(
        t["verdict"] not in PASSING_TASK_VERDICTS or any(t.get(gate.key) == Verdict.FAIL for gate in recorded())
        for t in row["tasks"].values()
    )


def run_passes(row: dict[str, Any]) -> bool:
    """Evidence for lifting a waive: the run did not fail and some gate that could have failed it passed."""
    return row["verdict"] == PASS and not run_fails(row)


def failure_signature(row: dict[str, Any]) -> str:
    """The first failing task as "task score X < threshold Y", else the first failed lossless gate as
    "task lossless FAIL: why", else the first failing event as "type: message"."""
    for name, t in row["tasks"].items():
        if t["verdict"] in PASSING_TASK_VERDICTS:
            continue
        if t["score"] is not None and t["threshold"] is not None:
            return f"{name} score {t['score']:.2f} < threshold {t['threshold']:.2f}"
        return f"{name} verdict {t['verdict']} (score {t['score']})"
    for gate in recorded():
        for name, t in row["tasks"].items():
            if t.get(gate.key) == Verdict.FAIL:
                return f"{name} {gate.name} FAIL: {t.get(gate.reason_column) or gate.fail_words}"
    try:
        events = Run(Path(row["path"])).events()
    except (OSError, UnreadableRunError):
        events = []  # the counts below still say what failed
    for event in events:
        if event.get("type") in FAILING_EVENTS:
            return f"{event['type']}: {_event_message(event)}"
    if row["failing_events"]:
        kinds = ", ".join(f"{k} x{v}" for k, v in row["failing_events"].items())
        return f"failing events {kinds}"
    return f"run verdict {row['verdict']}"


def _event_message(event: dict[str, Any]) -> str:
    for key in ("message", "reason", "error"):
        if event.get(key):
            return str(event[key])
    rest = {k: v for k, v in event.items() if k not in ("ts", "rank", "type")}
    return ", ".join(f"{k}={v}" for k, v in rest.items()) or "(no details)"


def _gate_evidence(task: Mapping[str, object]) -> dict[str, object]:
    """A row's task's gate verdicts as the evidence keeps them (an opt-in gate's only where recorded)."""
    out: dict[str, object] = {}
    for gate in recorded():
        if gate.key in task or not gate.opt_in:
            out[gate.key] = task.get(gate.key)
            if gate.underpowerable:
                out[gate.underpowered_column] = bool(task.get(gate.underpowered_column))
    return out


def _evidence(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "run_id": row["run_id"],
        "started": row["started"],
        "commit": row["commit"],
        "gpu": row["gpu"],
        "verdict": row["verdict"],
        "tasks": {
            n: {
                "score": t["score"],
                "threshold": t["threshold"],
                "verdict": t["verdict"],
                **_gate_evidence(t),
            }
            for n, t in row["tasks"].items()
        },
        "failing_events": row["failing_events"],
        "passes": run_passes(row),
    }


def _read_waives(path: str | Path) -> WaivesFile:
    path = Path(path)
    return WaivesFile.read(path) if path.exists() else WaivesFile(path=path)


def _where(gpu: str | None) -> str:
    return f"on {gpu}" if gpu else "on any GPU"


def decide(test_id: str, gpu: str | None, root: str | Path, waives_path: str | Path, k: int = 3) -> Decision:
    """Recommend an action for test_id on gpu (None: runs on any GPU, and only waives without `full:`)."""
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    waives = _read_waives(waives_path)
    applying = waives.find(test_id, gpu)
    exact = [e for e in applying if e.gpu == gpu]
    waived = bool(applying)
    table = runs_table(root, test_id=test_id, gpu=gpu)
    rows = [r for r in reversed(table.rows) if r["finished"]]

    def decision(action: str, reason: str, evidence_rows: list[dict[str, Any]], signature: str | None = None):
        return Decision(
            test_id,
            gpu,
            action,
            reason,
            waived,
            [_evidence(r) for r in evidence_rows],
            signature,
            [f"line {e.line_no}: {e.text}" for e in applying],
            table.unreadable,
        )

    if not rows:
        return decision(KEEP, f"no finished runs of this test {_where(gpu)} under {root}{_note(table.unreadable)}", [])
    newest = rows[0]
    if run_fails(newest):
        signature = failure_signature(newest)
        newer = _unreadable_since(table.unreadable, newest)
        if waived:
            return decision(
                KEEP,
                f"the newest run {newest['run_id']} fails ({signature}); already waived "
                f"({_lines(applying)}){_note(newer)}",
                rows[:k],
                signature,
            )
        reason = f"the newest run {newest['run_id']} fails: {signature}{_note(newer)}"
        return decision(WAIVE, reason, rows[:k], signature)
    if not waived:
        what = "passes" if run_passes(newest) else f"is NO-GATE ({_no_gate_why(newest)})"
        return decision(KEEP, f"the newest run {newest['run_id']} {what} and the test is not waived", rows[:k])
    # Runs no gate could fail are no evidence either way: the k passing runs are the newest k that could fail.
    ungated_runs = [r for r in rows if r["verdict"] == NO_GATE]
    rows = [r for r in rows if r["verdict"] != NO_GATE]
    recent = rows[:k]
    failed = next((r for r in recent if run_fails(r)), None)
    if failed is not None:
        passing = recent.index(failed)
        return decision(
            KEEP,
            f"only {passing} of {k} required passing runs: {failed['run_id']} fails ({failure_signature(failed)})",
            recent,
        )
    if len(recent) < k:
        left_out = f" ({len(ungated_runs)} NO-GATE run(s) left out: no gate could fail them)" if ungated_runs else ""
        return decision(KEEP, f"only {len(recent)} of {k} required passing runs {_where(gpu)}{left_out}", recent)
    blocking = _unreadable_since(table.unreadable, recent[-1])
    if blocking:
        u = blocking[-1]
        return decision(
            KEEP,
            f"the {k} most recent readable runs {_where(gpu)} pass, but {len(blocking)} run(s) "
            f"among or after them cannot be read (newest: {u['run_id']}: {u['reason']}); "
            "not lifting a waive on evidence that may hide a failure",
            recent,
        )
    if not exact:
        return decision(
            KEEP,
            f"the {k} most recent runs on {gpu} pass, but the waive applies to every GPU "
            f"({_lines(applying)}); decide without --gpu to lift it",
            recent,
        )
    reason = f"the {k} most recent runs {_where(gpu)} pass"
    ungated = _ungated(recent)
    if ungated:
        reason += f" ({ungated}: passing, but not gated against the reference)"
    wide = _underpowered(recent)
    if wide:
        powerless = ", ".join(gate.name for gate in recorded() if gate.underpowerable)
        reason += f" ({wide}: {powerless} {UNDERPOWERED})"
    if ungated_runs:
        reason += f"; {len(ungated_runs)} NO-GATE run(s) left out (no gate could fail them)"
    still = [e for e in applying if e.gpu != gpu]
    if still:
        reason += f"; still waived on every GPU by {_lines(still)}"
    return decision(UNWAIVE, reason, recent)


def _unreadable_since(unreadable: list[dict[str, Any]], oldest: dict[str, Any]) -> list[dict[str, Any]]:
    """Unreadable runs that started at or after `oldest` (a run row); one whose start is unknown counts too."""
    since = oldest["started_ts"]
    return [u for u in unreadable if u["started_ts"] is None or since is None or u["started_ts"] >= since]


def _note(unreadable: list[dict[str, Any]]) -> str:
    if not unreadable:
        return ""
    u = unreadable[-1]
    return (
        f"; note: {len(unreadable)} run(s) that may be of this test cannot be read (newest: {u['run_id']}: "
        f"{u['reason']})"
    )


def _lines(entries: list[WaiveEntry]) -> str:
    return ", ".join(f"line {e.line_no}" for e in entries)


def _ungated(rows: list[dict[str, Any]]) -> str:
    """Text like "gpqa_diamond NO-GATE in 2 of 3 runs" for tasks whose verdict was not PASS in some of the runs."""
    counts: dict[tuple[str, str], int] = {}
    for row in rows:
        for name, t in row["tasks"].items():
            if t["verdict"] != Verdict.PASS:
                counts[(name, t["verdict"])] = counts.get((name, t["verdict"]), 0) + 1
    return ", ".join(f"{name} {verdict} in {n} of {len(rows)} runs" for (name, verdict), n in counts.items())


def _underpowered(rows: list[dict[str, Any]]) -> str:
    """Text like "gsm8k in 2 of 3 runs" for tasks whose gate passed underpowered (the acceptance gate's within a
    band wider than min_al)."""
    counts: dict[str, int] = {}
    for row in rows:
        for name, t in row["tasks"].items():
            if any(t.get(gate.underpowered_column) for gate in recorded() if gate.underpowerable):
                counts[name] = counts.get(name, 0) + 1
    return ", ".join(f"{name} in {n} of {len(rows)} runs" for name, n in counts.items())


def waive_reason(decision: Decision, bug_url: str | None) -> str:
    """The text in parentheses on a written waive line: the bug URL, else the failure signature."""
    if bug_url and bug_url.strip():
        return bug_url.strip()
    text = (decision.signature or decision.reason).translate(_BRACKETS)
    signature = " ".join(_UNSAFE_REASON.sub(" ", text).split())
    return f"specdec-eval decide: {signature}"[:200].rstrip()


def apply_decision(decision: Decision, waives_path: str | Path, bug_url: str | None = None) -> list[str]:
    """Edit the waives file as the decision says, under the file's lock (`edit_waives`); every other byte stays as
    it was. Returns the changed lines as "+TEXT" / "-TEXT" (empty for "keep", or when the file already says what
    the decision wants)."""
    if decision.action not in (WAIVE, UNWAIVE):
        return []
    with edit_waives(waives_path, create=True) as waives:
        if decision.action == WAIVE:
            if not waives.waive(decision.test_id, waive_reason(decision, bug_url), gpu=decision.gpu):
                return []
            entry = next(e for e in waives.entries if decision.test_id in e.test_ids and e.gpu == decision.gpu)
            return [f"+{entry.text}"]
        return [f"-{e.text}" for e in waives.unwaive(decision.test_id, gpu=decision.gpu)]


def _no_gate_why(row: dict[str, Any]) -> str:
    """Why a run is NO-GATE: its lossless gate could not judge (with what to do), or no gate could fail it."""
    for name, t in row["tasks"].items():
        for gate in recorded():
            reason = t.get(gate.reason_column)
            if t.get(gate.key) in (Verdict.NO_GATE, Verdict.UNCALIBRATED) and Verdict.UNCALIBRATED in str(reason):
                return f"{name} {gate.name} {reason}"
    return "no gate could fail it"
