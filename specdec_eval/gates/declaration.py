"""What a gate is to its readers (`GateDeclaration`): its name, the key summary.json keeps its record under, the module
of evals/gates that judges it, and how readers show it. Declared apart from the judging, in a leaf every folder may
import, so that the readers of a run folder (results/, the selftest matrices, the sweep, `bench --verdict`) iterate
the gates without importing the code that judges them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol


class _Judged(Protocol):
    """What a reader holds of a judged task (results' TaskSummary): its gates' records by summary.json key."""

    gates: Mapping[str, Any]


@dataclass(frozen=True)
class GateDeclaration:
    """One gate as readers know it. `key` None: its record is the task entry's own verdict (the accuracy test's, as
    summary.json has always kept it). `opt_in`: judged only when `run --gate NAME[=SETTING]` asks, so readers show
    it only where a run recorded it. `underpowerable`: its PASS can fail to rule out the regression it exists for
    (readers never show that PASS bare, and the runs table says so in `underpowered_column`)."""

    name: str  # what readers call it: "the NAME gate"
    key: str | None  # summary.json's key of its record under each task
    judged_in: str  # its judging module, under evals/gates
    fail_words: str = "see its reason"  # what `decide` says of a FAIL that recorded no reason
    opt_in: bool = False
    underpowerable: bool = False

    @property
    def reason_column(self) -> str:
        """The runs table's column of the gate's reason (its verdict's column is `key`)."""
        return f"{self.name}_reason"

    @property
    def underpowered_column(self) -> str:
        return f"{self.name}_underpowered"

    def result(self, task: _Judged) -> Any:
        """The gate's recorded result on a task (a GateResult; None: not judged there, or the task's own)."""
        return task.gates.get(self.key) if self.key is not None else None
