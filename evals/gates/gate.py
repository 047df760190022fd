"""What every gate is (`Gate`): its declaration (`GateDeclaration`: the name readers show, the key summary.json keeps
its record under, how readers show it), whether it applies to a run, and `judge(evidence, run)`: a pure judgement
of what the run measured (`RunEvidence`) against the run as resolved once (`ResolvedRun`), returned as typed values
(`GateOutcome`). Gates are listed by their declarations; `registry` finds each one's judging module from them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ...errors import UserError
from ...gates.declaration import GateDeclaration
from ...results.run_summary import GateResult, RunSummary, TaskSummary
from ...results.sample_record import SampleRecord
from ...results.shown_verdict import gate_words
from ..run_types import TaskResult
from .resolved_run import ResolvedRun


@dataclass(frozen=True)
class RunEvidence:
    """What a run measured, and its summary as the gates judged before this one left it (the acceptance reference
    is written only from a run no earlier gate FAILed)."""

    results: tuple[TaskResult, ...]
    samples: tuple[SampleRecord, ...]
    summary: RunSummary


@dataclass(frozen=True)
class GateOutcome:
    """One gate's judgement of a run: each task's result it judged, and the run-level records it adds to the summary
    (by RunSummary field: the lossless gate's "baseline", the acceptance gate's "acceptance_populated")."""

    tasks: Mapping[str, GateResult] = field(default_factory=dict)
    run: Mapping[str, Any] = field(default_factory=dict)


class Gate:
    """One gate's judging half; its name, key and opt-in are its declaration's. `key` None: the gate's record is the
    task entry's own verdict (the accuracy test's, as summary.json has always kept it). An opt-in gate runs only
    when `run --gate NAME[=SETTING]` asks for it, so no run judged without it changes its verdict."""

    declaration: ClassVar[GateDeclaration]
    help: ClassVar[str] = ""  # an opt-in gate's `--gate` help: what it judges, what its setting means

    @property
    def name(self) -> str:
        return self.declaration.name

    @property
    def key(self) -> str | None:
        return self.declaration.key

    @property
    def opt_in(self) -> bool:
        return self.declaration.opt_in

    def applies(self, run: ResolvedRun) -> bool:
        return not self.opt_in or self.name in run.opt_in

    def judge(self, evidence: RunEvidence, run: ResolvedRun) -> GateOutcome:
        raise NotImplementedError

    def result(self, task: TaskSummary) -> GateResult | None:
        """This gate's recorded result on a task (None: not judged there; the accuracy test's is the task's own)."""
        return self.declaration.result(task)

    def report_lines(self, task: TaskSummary) -> list[str]:
        """What `run` prints about this gate under a task: its verdict and why."""
        result = self.result(task)
        return [f"{self.name} gate: {gate_words(result)} ({result.reason})"] if result is not None else []

    def check_setting(self, setting: str | None) -> None:
        """UserError unless `setting` (what follows `=` in --gate NAME=SETTING) is one this gate takes."""
        if setting is not None:
            raise UserError(f"--gate {self.name} takes no setting, got {setting!r}")
