"""What `specdec-eval run` prints: per task the hypothesis-test report, filters, gates and acceptance; then one
line per task and the run's verdict. A task with failed requests gets no score: its filters would count each
failure as a wrong answer, and "0.00" would read like a measurement."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from ..evals.gates.registry import gates
from ..evals.lossless.margins import WHAT_TO_DO
from ..results.run_summary import NO_GATE, PASS, RunSummary, TaskSummary, as_run_summary
from ..results.shown_verdict import UNDERPOWERED, gate_words


def failed_requests(task: TaskSummary) -> str | None:
    """'8 of 8 requests FAILED' when the task has failed requests (then its score is not a measurement)."""
    failed = task.num_failed_requests or 0
    return f"{failed} of {task.num_samples} requests FAILED" if failed else None


def print_report(summary: RunSummary | Mapping[str, Any]) -> None:
    out = sys.stdout
    summary = as_run_summary(summary)
    for name, t in summary.tasks.items():
        print(f"\n{name}: {t.num_samples} samples from {t.data}", file=out)
        failed = failed_requests(t)
        if failed:  # the hypothesis report and the filter scores would count each failure as a wrong answer
            print(f"score n/a: {failed} (a failed request is not an answer; the task is not scored)", file=out)
        else:
            print(t.report, file=out)
        for m in (t.filter_mismatches or [])[:5]:
            print(
                f"warning: doc {m['doc_id']} {m['filter']}: our filter gives {m['ours']}, lm-eval's "
                f"{m['lm_eval']} (lm-eval's is scored)",
                file=out,
            )
        if not failed:
            scores = ", ".join(f"{k} {v:.2f}" for k, v in (t.filter_scores or {}).items())
            print(f"filters: {scores}; score = their mean = {t.score:.2f}", file=out)
        for gate in gates():
            for line in gate.report_lines(t):
                print(line, file=out)
    print("", file=out)
    for name, t in summary.tasks.items():
        ref = "no ref"
        if t.reference is not None:
            ref = f"ref {t.reference:.2f} thr {t.threshold:.2f} theta {t.theta:.2f}"
        judged = "".join(f"  {g.name} {gate_words(r)}" for g in gates() if (r := g.result(t)) is not None)
        failed = failed_requests(t)
        score = f"{'n/a':>6}" if failed else f"{t.score:6.2f}"
        note = f"  ({failed})" if failed else ""
        print(f"{name:<20} {score}  {ref:<32} {t.verdict}{judged}{note}", file=out)
    _print_audit(summary, out)
    _print_run_notes(summary, out)
    if summary.events:
        print("events: " + ", ".join(f"{k} {v}" for k, v in sorted(summary.events.items())), file=out)
    verdict = summary.shown_verdict  # NO-GATE where no gate could have failed the run
    why = " (no gate could fail this run)" if verdict == NO_GATE else ""
    unjudged = _by_gate(summary, "uncalibrated")
    if verdict == NO_GATE and unjudged:  # the lossless gate could not judge: say what would let it
        why = "".join(f" (the {g} gate could not judge {', '.join(tasks)}: {WHAT_TO_DO})" for g, tasks in unjudged)
    wide = _by_gate(summary, "underpowered")
    if verdict == PASS and wide:  # a PASS that rests partly on an acceptance band too wide to see min_al
        why = "".join(f" ({g} {UNDERPOWERED} on {', '.join(tasks)})" for g, tasks in wide)
    print(f"run {verdict}{why} in {summary.elapsed_s:.0f} s ({summary.world_size} rank(s))", file=out)
    if summary.server_failure:  # why the server failed it, after the verdict (an endpoint run)
        print(summary.server_failure, file=out)


def populated_line(populated: dict[str, Any]) -> str:
    """What --populate-acceptance did: the reference written, with the documents and draft cycles it rests on,
    or why nothing was written."""
    n = populated.get("num_documents")
    basis = f" from {n} {populated.get('task')} documents ({populated.get('num_cycles')} draft cycles)" if n else ""
    al = populated.get("ref_al")
    figure = f"{populated['test_id']}" + (f" ref_al {al:.4f}{basis}" if al is not None else "")
    if populated.get("refused"):
        return f"acceptance reference NOT written ({figure}): {populated['refused']}"
    if not populated["changed"]:
        return f"acceptance reference unchanged: {figure} is already in {populated['path']}"
    return f"acceptance reference written: {figure} in {populated['path']}"


def _print_audit(summary: RunSummary, out) -> None:
    """The paired twins' audit: which documents a plain engine decoded, and where it first differed."""
    audit = (summary.baseline or {}).get("audit")
    if audit is None:
        return
    docs = ", ".join(f"{d['task']} {d['doc_id']}" for d in audit["audited"]) or "none"
    first = audit["first_divergence"]
    found = (
        f"first divergence: {first['task']} doc {first['doc_id']} at token {first['position']}"
        if first
        else "every audited twin identical"
    )
    # Outside float32 a plain engine may differ from a twin by rounding: each task's gate judged those divergences.
    judged = [
        f"{name}: {g.numbers['audit_margins']}"
        for name, t in summary.tasks.items()
        for g in t.gates.values()
        if g.numbers.get("audit_margins")
    ]
    found += "".join(f"; {j}" for j in judged)
    print(
        f"twin audit (no spec worker): {audit['num_audited']} of {audit['planned']} planned documents ({docs}); "
        f"{found}; {audit['elapsed_s']:.1f} s",
        file=out,
    )


def _print_run_notes(summary: RunSummary, out) -> None:
    """What the run says beside its tasks: the engine's (or server's) own acceptance figures, a written reference,
    a fault that was asked for and never fired (then the run did not test what it was asked to)."""
    reported = summary.reported_acceptance
    if reported:
        al = reported.get("acceptance_length")
        figure = f"acceptance length {al:.3f}" if isinstance(al, int | float) else "no acceptance length"
        basis = f"; {reported['basis']}" if reported.get("basis") else ""  # per-request counts or the fallback
        print(f"reported by the engine: {figure} (source: {reported.get('source', 'unknown')}{basis})", file=out)
    populated = summary.acceptance_populated
    if populated:
        print(populated_line(populated), file=out)
    for fault in summary.faults_never_fired or ():
        print(f"warning: injected fault {fault} never fired; this run did not exercise it", file=out)


def _by_gate(summary: RunSummary, which: str) -> list[tuple[str, list[str]]]:
    """(gate name, its tasks) for each gate some task's result is `which` of (`TaskSummary.uncalibrated`,
    `TaskSummary.underpowered`), in the registry's order."""
    found = []
    for gate in gates():
        tasks = [n for n, t in summary.tasks.items() if gate.key in getattr(t, which)]
        if tasks:
            found.append((gate.name, tasks))
    return found
