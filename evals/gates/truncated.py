"""An opt-in gate on cut-off answers (`run --gate truncated[=SHARE]`): a task FAILs when more than SHARE of its
outputs stopped at the output-length limit (finish reason "length"), since its score then measures answers the limit
cut off, not the model: a --max-output-len too short for the task, or an engine that stops emitting its end token.
No run judged without it changes its verdict."""

from __future__ import annotations

from ...errors import UserError
from ...gates.truncated import GATE as TRUNCATED
from ...results.run_summary import GateResult, Verdict
from .gate import Gate, GateOutcome, RunEvidence
from .resolved_run import ResolvedRun

DEFAULT_MAX_SHARE = 0.1


class TruncatedGate(Gate):
    declaration = TRUNCATED
    help = f"truncated[=SHARE]: a task FAILs when over SHARE (default {DEFAULT_MAX_SHARE}) of its outputs were cut off"

    def check_setting(self, setting: str | None) -> None:
        max_share(setting)

    def judge(self, evidence: RunEvidence, run: ResolvedRun) -> GateOutcome:
        share = max_share(run.opt_in.get(self.name))
        tasks = {}
        for r in evidence.results:
            answered = [s for s in r.samples if not s.failed]  # a failed request is the accuracy gate's FAIL
            cut = sum(s.finish_reason == "length" for s in answered)
            tasks[r.task] = judge_share(cut, len(answered), share)
        return GateOutcome(tasks)


def judge_share(cut: int, answered: int, share: float) -> GateResult:
    numbers = {"truncated": cut, "answered": answered, "max_share": share}
    if not answered:
        return GateResult(Verdict.NO_GATE, "no answered request to judge", numbers)
    said = f"{cut} of {answered} outputs ({100 * cut / answered:.1f} %) stopped at the output-length limit"
    if cut / answered > share:
        why = f"{said}, above the {100 * share:.1f} % this gate allows: the score measures cut-off answers"
        return GateResult(Verdict.FAIL, why, numbers)
    return GateResult(Verdict.PASS, f"{said}, at most {100 * share:.1f} %", numbers)


def max_share(setting: str | None) -> float:
    """The SHARE of --gate truncated=SHARE: a fraction in [0, 1]."""
    if setting is None:
        return DEFAULT_MAX_SHARE
    try:
        share = float(setting)
    except ValueError:
        share = -1.0
    if not 0.0 <= share <= 1.0:
        raise UserError(f"--gate truncated={setting}: SHARE is a fraction from 0 to 1")
    return share


GATE = TruncatedGate()
