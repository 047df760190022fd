"""The lossless gate over a run: every spec-dec sample against its non-speculative baseline, task by task (the judges
are the lossless package's), and the baseline record the verdicts rest on."""

from __future__ import annotations

from typing import Any

from ...gates.lossless import GATE as LOSSLESS
from ...results.run_summary import TaskSummary
from ..lossless.gate import evaluate_lossless
from .gate import Gate, GateOutcome, RunEvidence
from .resolved_run import ResolvedRun


class LosslessGate(Gate):
    declaration = LOSSLESS

    def applies(self, run: ResolvedRun) -> bool:
        return run.spec_dec

    def judge(self, evidence: RunEvidence, run: ResolvedRun) -> GateOutcome:
        samples = list(evidence.samples)
        tasks, record = evaluate_lossless(
            evidence.summary.tasks, samples, run.identity, list(evidence.results), run.baseline
        )
        return GateOutcome(tasks, {"baseline": record} if record is not None else {})

    def report_lines(self, task: TaskSummary) -> list[str]:
        """The verdict, the pairs it rests on, and the first divergences with their margins."""
        result = self.result(task)
        if result is None:
            return []
        ls = result.numbers
        line = f"lossless: {result.verdict} ({result.reason})"
        if ls.get("num_pairs"):
            line += f"; identical {ls['identical']}/{ls['num_pairs']}, McNemar p {ls['mcnemar_p']:.3g}"
            line += f" vs {ls.get('baseline_label') or 'baseline run'} {ls['baseline_run']}"
        divergent = [
            f"  divergent doc {d['doc_id']}: first differing token at {d['position']}{_margin(d)}"
            for d in ls.get("divergences", [])[:10]
        ]
        return [line, *divergent]


def _margin(divergence: dict[str, Any]) -> str:
    """The text after a divergence, e.g. ", margin 0.0156 nats (near-tie)", when it carries margins."""
    m = divergence.get("margins") or {}
    if m.get("judged") is None:
        return ""
    bound = " (lower bound)" if m.get("lower_bound") else ""
    return f", margin {m['judged']:.4f} nats{bound}" + (f" ({m['class']})" if m.get("class") else "")


GATE = LosslessGate()
