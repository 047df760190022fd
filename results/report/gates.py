"""Each gate's verdict in words, per task and run, and which gate decided a run (the report's banner).

The gates a task's summary entry can carry:

- accuracy: `verdict` with `score`, `threshold`, `reference`: PASS / FAIL against the threshold, NO-GATE when the
  threshold is at or below the floor (accuracy cannot fail at this n), REPORT without a reference; a failed
  request fails the task whatever its score (`num_failed_requests`).
- lossless: `lossless` {verdict, identical, num_pairs, divergences, baseline_run, baseline_label, audit, reason}: the
  spec-dec outputs against the non-speculative baseline, and which kind of baseline that is (a paired twin audited
  on a plain engine, a separate plain run, a recorded run).
- acceptance: `acceptance_gate` {verdict PASS | FAIL | NO-REFERENCE, acceptance_length, ref_al, min_al, rtol,
  slack, band {low, high, tolerance}, power {mde, p_detect_min_al, band_wider_than_min_al, statement, ...}, reason,
  per_position [{position, rate, ref, verdict}], test_id}: the acceptance length against the band the gate computed
  (rtol widened by the run's sampling slack) and what that band can see, shown as recorded and never recomputed
  here; a PASS within a band wider than min_al says so.
- `stopped` {n, of, reason}: a sequential test stopped the task early.

Every function returns plain text; the HTML and Markdown renderers escape it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ...event_types import FAILING_EVENTS
from ...gates import declarations
from ...gates.acceptance import GATE as ACCEPTANCE
from ...gates.declaration import GateDeclaration
from ...gates.lossless import GATE as LOSSLESS
from ..run_summary import FAIL, NO_GATE, PASS, TaskSummary, Verdict
from ..shown_verdict import UNDERPOWERED, gate_words, verdict_words
from .data import RunData
from .text import num

_MAX_DIVERGENT = 5


@dataclass
class GateText:
    verdict: str  # the gate's own verdict, for the badge
    text: str  # the verdict in words


def _typed(task: TaskSummary | Mapping[str, Any]) -> TaskSummary:
    return task if isinstance(task, TaskSummary) else TaskSummary.from_json(task)


def accuracy_gate(task: TaskSummary | Mapping[str, Any]) -> GateText:
    info = _typed(task)
    verdict = str(info.verdict or "?")
    score, threshold, reference = info.score, info.threshold, info.reference
    ref = f" (reference {num(reference)})" if isinstance(reference, (int, float)) else ""
    failed = info.num_failed_requests or 0
    if failed:
        n = info.num_samples
        of = f" of {n}" if n else ""
        return GateText(FAIL, f"FAIL: {failed}{of} requests failed (a failed request is never scored as an answer)")
    if verdict in (PASS, FAIL) and isinstance(threshold, (int, float)) and isinstance(score, (int, float)):
        # from the numbers: a task's verdict may also carry another gate's FAIL
        if score >= threshold:
            return GateText(PASS, f"PASS: {num(score)} ≥ threshold {num(threshold)}{ref}")
        return GateText(FAIL, f"FAIL: {num(score)} < threshold {num(threshold)}{ref}")
    if verdict == Verdict.NO_GATE:
        n = info.num_samples
        at = f" n = {n}" if n else " this n"
        return GateText(
            verdict,
            f"NO-GATE: threshold {num(threshold)} is at or below the floor, so accuracy cannot "
            f"fail at{at} (score {num(score)}){ref}",
        )
    if verdict == Verdict.REPORT:
        return GateText(verdict, f"REPORT: no reference, score {num(score)} only")
    return GateText(verdict, f"{verdict}: score {num(score)}, threshold {num(threshold)}{ref}")


def lossless_gate(task: TaskSummary | Mapping[str, Any]) -> GateText | None:
    """None when the task had no lossless gate (not spec-dec)."""
    gate = LOSSLESS.result(_typed(task))
    if gate is None:
        return None
    ls = gate.to_json()  # the gate's numbers as it recorded them
    verdict = str(ls.get("verdict", "?"))
    identical, divergent = ls.get("identical"), ls.get("divergent")
    n = ls.get("num_pairs")
    if n is None and isinstance(identical, int) and isinstance(divergent, int):
        n = identical + divergent
    kind = ls.get("baseline_label") or "baseline"  # which kind of baseline the verdict rests on (older runs: none)
    base = f"{kind} {ls['baseline_run']}" if ls.get("baseline_run") else "the baseline"
    audit = ls.get("audit") if isinstance(ls.get("audit"), dict) else {}
    # The twins themselves are wrong (their count means nothing), unless the audit's divergences were near-ties.
    if audit.get("first_divergence") and ls.get("reason") and not ls.get("audit_margins"):
        return GateText(verdict, f"{verdict}: {ls['reason']}")
    if verdict in (PASS, FAIL) and isinstance(identical, int) and n:
        text = f"{verdict}, {identical}/{n} identical to {base}"
        firsts = [d for d in ls.get("divergences") or [] if isinstance(d, dict)]
        if firsts:
            shown = ", ".join(f"doc {d.get('doc_id')} @ token {d.get('position')}" for d in firsts[:_MAX_DIVERGENT])
            more = f" (+{len(firsts) - _MAX_DIVERGENT} more)" if len(firsts) > _MAX_DIVERGENT else ""
            text += f"; first divergent: {shown}{more}"
        if ls.get("margin_rule") and ls.get("reason"):  # judged by margins against a control (evals/lossless/)
            text += f"; {ls['reason']}"
        if ls.get("audit_margins"):
            text += f"; twin audit: {ls['audit_margins']}"
        return GateText(verdict, text)
    reason = ls.get("reason")
    return GateText(verdict, f"{verdict}: {reason}" if reason else verdict)


def acceptance_band(g: dict[str, Any]) -> tuple[float | None, float | None]:
    """(low, high) of the band the acceptance gate passed or failed the run in, exactly as the gate wrote it into
    the summary (`band`: the tolerance widened by the run's sampling slack, the tripwire lowered by it); (None, None)
    when the summary records no band (no reference, or a summary written before the gate recorded its band). Never
    recomputed here: a report that drew its own band once contradicted the gate's verdict."""
    band = g.get("band")
    if not isinstance(band, dict):
        return None, None
    low, high = band.get("low"), band.get("high")
    return (low if _is_number(low) else None), (high if _is_number(high) else None)


def acceptance_gate(task: TaskSummary | Mapping[str, Any]) -> GateText | None:
    """None when the task had no acceptance gate."""
    gate = ACCEPTANCE.result(_typed(task))
    if gate is None:
        return None
    g = gate.to_json()  # the gate's numbers as it recorded them
    verdict = str(g.get("verdict", "?"))
    al = g.get("acceptance_length")
    lo, hi = acceptance_band(g)
    ref, min_al = g.get("ref_al"), g.get("min_al")
    if lo is not None and hi is not None:
        band = g["band"]
        tolerance, rtol, slack = band.get("tolerance"), g.get("rtol"), g.get("slack")
        parts = [f"ref {num(ref, 3)} ± {_percent(tolerance)}"]
        if _is_number(slack) and slack > 0:
            widened = _is_number(rtol) and _is_number(tolerance) and tolerance > rtol
            parts.append(
                f"{'rtol ' + _percent(rtol) + ' widened by ' if widened else ''}sampling slack {num(slack, 3)}"
            )
        if _is_number(min_al):
            parts.append(f"min {num(min_al, 3)}" + (" - slack" if _is_number(slack) and slack > 0 else ""))
        where = "within" if verdict == PASS else "outside" if verdict == FAIL else "vs"
        text = f"{verdict}: AL {num(al, 3)} {where} [{num(lo, 3)}, {num(hi, 3)}] ({', '.join(parts)})"
    elif _is_number(ref):
        text = f"{verdict}: AL {num(al, 3)} (ref {num(ref, 3)}; this summary does not record its gate's band)"
    else:
        text = f"{verdict}: AL {num(al, 3)}, no reference band"
    positions = [p for p in g.get("per_position") or [] if isinstance(p, dict)]
    failing = [p for p in positions if p.get("verdict") == FAIL]
    if failing:
        text += "; " + ", ".join(
            f"position {p.get('position')} rate {num(p.get('rate'), 3)} < ref {num(p.get('ref'), 3)}" for p in failing
        )
    if g.get("reason") and verdict != PASS:
        text += f" — {g['reason']}"
    if gate.underpowered:
        text = text.replace(f"{PASS}:", f"{verdict_words(PASS, True)}:", 1)
    power = g.get("power")
    if verdict in (PASS, FAIL) and isinstance(power, dict) and power.get("statement"):
        text += f"; power: {power['statement']}"
    return GateText(verdict, text)


def recorded_gate(gate: GateDeclaration, task: TaskSummary | Mapping[str, Any]) -> GateText | None:
    """Any gate's record in words, for a gate with no text of its own here: its verdict, then why."""
    result = gate.result(_typed(task))
    if result is None:
        return None
    words = gate_words(result)
    return GateText(result.verdict, f"{words}: {result.reason}" if result.reason else str(words))


# The gates whose records have words of their own (the others read as `recorded_gate`), by name.
_TEXTS: dict[str, Callable[[TaskSummary | Mapping[str, Any]], GateText | None]] = {
    LOSSLESS.name: lossless_gate,
    ACCEPTANCE.name: acceptance_gate,
}


def gate_text(gate: GateDeclaration, task: TaskSummary | Mapping[str, Any]) -> GateText | None:
    """A gate's verdict on a task in words (None: the gate did not judge it; the accuracy test always has one)."""
    if gate.key is None:
        return accuracy_gate(task)
    own = _TEXTS.get(gate.name)
    return own(task) if own is not None else recorded_gate(gate, task)


def gate_texts(task: TaskSummary | Mapping[str, Any]) -> dict[str, GateText | None]:
    """Every declared gate's words on a task, by gate name, in the order gates judge."""
    return {gate.name: gate_text(gate, task) for gate in declarations()}


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _percent(x: Any) -> str:
    return f"{100 * x:.0f}%" if _is_number(x) else "?"


def stopped_text(task: TaskSummary | Mapping[str, Any]) -> str | None:
    s = _typed(task).stopped
    if not isinstance(s, dict):
        return None
    reason = f": {s['reason']}" if s.get("reason") else ""
    return f"stopped early at {s.get('n')} of {s.get('of')} samples{reason}"


# --- which gate decided -------------------------------------------------------------------------------------


@dataclass
class RunDecision:
    verdict: str
    decided_by: list[str] = field(default_factory=list)  # "the accuracy gate on gsm8k", ...
    notes: list[str] = field(default_factory=list)  # "accuracy cannot fail at this n", ...

    @property
    def sentence(self) -> str:
        """E.g. "PASS (decided by the lossless gate; accuracy cannot fail at this n)"."""
        if self.verdict == FAIL and not self.decided_by:
            inner = "recorded as FAIL; no failing gate found in the summary"
        elif self.decided_by:
            inner = "decided by " + _and(self.decided_by)
        else:
            inner = "no gate could fail"
        return f"{self.verdict} ({'; '.join([inner, *self.notes])})"


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _on(tasks: list[str], every: list[str]) -> str:
    return "" if tasks == every else f" on {', '.join(tasks)}"


def decide_run(run: RunData) -> RunDecision:
    """Which gates failed a run (FAIL), or which gates with the power to fail passed it (PASS)."""
    every = [t.task for t in run.tasks]
    passed: dict[str, list[str]] = {gate.name: [] for gate in declarations()}
    own = {gate.name for gate in declarations() if gate.key is None}  # the task entry's own verdict: accuracy's
    failed: list[str] = []
    no_gate, no_ref, stopped = [], [], []
    for t in run.tasks:
        for name, gate in gate_texts(t.summary).items():
            if gate is None:
                continue
            if gate.verdict == FAIL:
                what = "failed requests" if name in own and t.summary.num_failed_requests else f"the {name} gate"
                failed.append(f"{what} on {t.task}: {gate.text.removeprefix('FAIL: ').removeprefix('FAIL, ')}")
            elif gate.verdict == PASS:
                passed[name].append(t.task)
        verdict = t.summary.verdict
        (no_gate if verdict == Verdict.NO_GATE else no_ref if verdict == Verdict.REPORT else []).append(t.task)
        if stopped_text(t.summary):
            stopped.append(t.task)
    failing_events = run.summary.failing_events
    if isinstance(failing_events, int) and failing_events:
        kinds = {k: v for k, v in run.event_counts().items() if k in FAILING_EVENTS}
        failed.append(f"failing events: {', '.join(f'{k} {v}' for k, v in kinds.items()) or failing_events}")
    if run.summary.server_failure:  # an endpoint run's server: why, from its log or the stall watch
        failed.append(run.summary.server_failure)
    notes = []
    for gate in declarations():
        wide = [t.task for t in run.tasks if gate.key in t.summary.underpowered]
        if wide:
            notes.append(f"{gate.name} {UNDERPOWERED}" + _on(wide, every))
    if no_gate:
        notes.append("accuracy cannot fail at this n" + _on(no_gate, every))
    if no_ref:
        notes.append("no accuracy reference" + _on(no_ref, every))
    if stopped:
        notes.append("stopped early" + _on(stopped, every))
    if run.verdict == FAIL:
        return RunDecision(FAIL, failed, notes)
    decided = [f"the {name} gate{_on(tasks, every)}" for name, tasks in passed.items() if tasks]
    return RunDecision(run.verdict, decided, notes)


def overall(runs: list[RunData]) -> str:
    """FAIL if a run failed; PASS if every run passed or could not fail and at least one gate passed somewhere;
    NO-GATE if no run could fail; else UNKNOWN."""
    verdicts = [r.verdict for r in runs]
    if any(v == FAIL for v in verdicts):
        return FAIL
    if verdicts and all(v in (PASS, NO_GATE) for v in verdicts):
        return PASS if PASS in verdicts else NO_GATE
    return "UNKNOWN"


def banner(runs: list[RunData]) -> str:
    """One line under the report's title: each run's verdict and the gate that decided it."""
    if len(runs) == 1:
        return decide_run(runs[0]).sentence
    return "; ".join(f"{r.label} {decide_run(r).sentence}" for r in runs)
