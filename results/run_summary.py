"""A run's summary as a value: what summary.json holds, typed, frozen, with its verdict derived, never stored.

Every gate returns a `GateResult` (verdict, reason, numbers); a `TaskSummary` holds a task's accuracy numbers and the
results of the gates judged on it; a `RunSummary` holds its tasks and event counts and derives the run's verdict from
them: FAIL when any gate FAILed or any failing event (a spec-state leak, an unrecovered request failure) was
recorded, else PASS. No writer sets a verdict, so no gate can forget to fail the run or overwrite another's FAIL.

`shown_verdict` is the verdict every reader prints (the report, the runs table, `decide`, the run's last line): a
PASS that no gate could have failed reads NO-GATE. summary.json keeps recording PASS there, as it always did.

`from_json`/`to_json` round-trip summary.json byte for byte, old runs included: keys this module does not know are
kept, absent keys stay absent, and the order the keys were read in is the order they are written in.

A leaf module: it imports nothing from the project but the gates' declarations (a leaf too), so results/ (which
imports none of cli/evals/launch/serve), the report and the gates that write it can all share it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from types import MappingProxyType
from typing import Any

from ..gates import by_key, declarations


class Verdict(str, Enum):
    """Every word a gate or a run's summary gives as its verdict. A `str`: summary.json keeps the words, and a
    verdict read back from it compares equal to its member."""

    PASS = "PASS"
    FAIL = "FAIL"
    NO_GATE = "NO-GATE"  # the gate could not fail here (a threshold below the floor, nothing a gate could judge)
    REPORT = "REPORT"  # accuracy with no reference: the score only
    NO_BASELINE = "NO-BASELINE"  # the lossless gate found no baseline run
    NO_REFERENCE = "NO-REFERENCE"  # the acceptance gate found no reference entry
    UNCALIBRATED = "UNCALIBRATED"  # the lossless gate could not judge its divergences (shown as NO-GATE)
    CONTINUE = "CONTINUE"  # a sequential design's look that decides nothing yet

    __str__ = str.__str__  # "PASS", never "Verdict.PASS", in f-strings and printed reports
    __format__ = str.__format__
    __hash__ = str.__hash__  # a key that finds the word's entry (Enum hashes the member's name: NO_GATE)


PASS, FAIL, NO_GATE = Verdict.PASS, Verdict.FAIL, Verdict.NO_GATE

_EMPTY: Mapping[str, Any] = MappingProxyType({})


def _frozen(mapping: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return MappingProxyType(dict(mapping or {}))


def _emit(
    values: dict[str, Any], order: tuple[str, ...], optional: frozenset[str], defaults: Mapping[str, Any] = _EMPTY
) -> dict[str, Any]:
    """The JSON object of a record: the keys it was read with, in that order, then any key set since (a gate added
    after loading; a key at its default was not). A record built fresh writes every key but the optional ones that
    have no value."""
    if order:
        added = [k for k, v in values.items() if k not in order and v is not None and v != defaults.get(k)]
        keys = [k for k in order if k in values] + added
    else:
        keys = [k for k, v in values.items() if v is not None or k not in optional]
    return {k: values[k] for k in keys}


@dataclass(frozen=True)
class GateResult:
    """One gate's judgement of one task: its verdict (PASS, FAIL, or a word for why it could not judge: NO-GATE,
    NO-REFERENCE, NO-BASELINE, UNCALIBRATED, ...), why, and the numbers it rests on (free-form: each gate its own)."""

    verdict: str
    reason: str = ""
    numbers: Mapping[str, Any] = field(default_factory=dict)
    key_order: tuple[str, ...] = field(default=(), compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "numbers", _frozen(self.numbers))

    @property
    def passed(self) -> bool:
        return self.verdict == PASS

    @property
    def failed(self) -> bool:
        return self.verdict == FAIL

    @property
    def uncalibrated(self) -> bool:
        """The gate could not judge what it measured (the lossless gate's divergences without a noise floor: older
        runs said UNCALIBRATED, newer NO-GATE with "uncalibrated": true): readers show NO-GATE, never PASS."""
        return self.verdict == Verdict.UNCALIBRATED or bool(self.numbers.get("uncalibrated"))

    @property
    def underpowered(self) -> bool:
        """A PASS within a band whose floor lies below the gate's own minimum (the acceptance gate's min_al): the
        regression it exists for would have passed too, so readers never show this PASS bare."""
        power = self.numbers.get("power")
        return self.passed and isinstance(power, Mapping) and bool(power.get("band_wider_than_min_al"))

    def to_json(self) -> dict[str, Any]:
        values = {**self.numbers, "verdict": self.verdict, "reason": self.reason}
        return _emit(values, self.key_order or tuple(values), frozenset(), {"reason": ""})

    @classmethod
    def from_json(cls, record: Mapping[str, Any]) -> GateResult:
        """From a gate's JSON record (keys in the order the gate wrote them; a record with no reason keeps none)."""
        numbers = {k: v for k, v in record.items() if k not in ("verdict", "reason")}
        order = tuple(record)
        return cls(str(record.get("verdict")), str(record.get("reason") or ""), numbers, order)


def _gate_name(key: str) -> str:
    declared = by_key(key)
    return declared.name if declared is not None else key


# A task entry's keys as `verdict` writes them, in order; the gates' records come last.
_TASK_KEYS = (
    "num_samples",
    "score",
    "filter_scores",
    "reference",
    "threshold",
    "theta",
    "verdict",
    "num_failed_requests",
    "acceptance",
    "data",
    "n_total",
    "subset",
    "stopped",
    "report",
    "filter_mismatches",
)
_TASK_OPTIONAL = frozenset({"subset", "stopped"})


def is_gate_record(value: Any) -> bool:
    """Whether a task entry's value beyond its own keys is a gate's record (any gate's, under the key it declares:
    "lossless", "acceptance_gate", an opt-in gate's): a mapping with a verdict, as every gate has written one."""
    return isinstance(value, Mapping) and "verdict" in value


@dataclass(frozen=True)
class TaskSummary:
    """One task of a run: its score and accuracy test (`verdict`: PASS, FAIL, NO-GATE below the floor, REPORT with
    no reference), and the other gates judged on it (`gates`, by summary.json key: "lossless", "acceptance_gate")."""

    verdict: str | None = None
    score: float | None = None
    num_samples: int | None = None
    filter_scores: Mapping[str, float] | None = None
    reference: float | None = None
    threshold: float | None = None
    theta: float | None = None
    num_failed_requests: int | None = None
    acceptance: Mapping[str, Any] | None = None
    data: Any = None
    n_total: int | None = None
    subset: Mapping[str, Any] | None = None
    stopped: Mapping[str, Any] | None = None
    report: Any = None
    filter_mismatches: Any = None
    gates: Mapping[str, GateResult] = field(default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)  # keys this module does not name (older or newer writers)
    key_order: tuple[str, ...] = field(default=(), compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "gates", _frozen(self.gates))
        object.__setattr__(self, "extra", _frozen(self.extra))

    @property
    def fails(self) -> bool:
        """The accuracy test or any other gate FAILed this task."""
        return self.verdict == FAIL or any(g.failed for g in self.gates.values())

    def gates_passed(self) -> list[str]:
        """The names of the gates with the power to fail that passed: the accuracy test's (the hypothesis test says
        NO-GATE or REPORT where it cannot fail), then each recorded gate's, by its declaration (a key no declaration
        names, an older or newer writer's, by its key)."""
        passed = [d.name for d in declarations() if d.key is None and self.verdict == PASS]
        return passed + [_gate_name(key) for key, g in self.gates.items() if g.passed]

    @property
    def uncalibrated(self) -> list[str]:
        """The keys of the gates that could not judge this task (`GateResult.uncalibrated`): the run shows NO-GATE."""
        return [key for key, g in self.gates.items() if g.uncalibrated]

    @property
    def underpowered(self) -> list[str]:
        """The keys of the gates whose PASS does not rule out the regression they exist for (`underpowered`)."""
        return [key for key, g in self.gates.items() if g.underpowered]

    def with_gate(self, name: str, result: GateResult) -> TaskSummary:
        return dataclasses.replace(self, gates={**self.gates, name: result})

    def with_accuracy(self, result: GateResult) -> TaskSummary:
        """This task with its accuracy test's result, kept as the task entry's own fields (as summary.json always
        kept it): the verdict, its report, and the threshold and theta it rests on."""
        numbers = result.numbers
        return dataclasses.replace(
            self,
            verdict=result.verdict,
            report=result.reason,
            threshold=numbers.get("threshold"),
            theta=numbers.get("theta"),
        )

    def to_json(self) -> dict[str, Any]:
        values = {k: getattr(self, k) for k in _TASK_KEYS}
        values = {k: dict(v) if isinstance(v, MappingProxyType) else v for k, v in values.items()}
        values.update(self.extra)
        values.update({name: g.to_json() for name, g in self.gates.items()})
        return _emit(values, self.key_order, _TASK_OPTIONAL)

    @classmethod
    def from_json(cls, record: Mapping[str, Any]) -> TaskSummary:
        known = {k: record[k] for k in _TASK_KEYS if k in record}
        gates = {k: GateResult.from_json(v) for k, v in record.items() if k not in known and is_gate_record(v)}
        extra = {k: v for k, v in record.items() if k not in known and k not in gates}
        return cls(**known, gates=gates, extra=extra, key_order=tuple(record))


# The run's own keys in the order the pipeline writes them; "verdict" is derived, written first.
_RUN_KEYS = (
    "events",
    "failing_events",
    "elapsed_s",
    "model",
    "kv_cache",
    "spec",
    "world_size",
    "run_id",
    "run_dir",
    "test_id",
    "reused_generations",
    "reported_acceptance",
    "faults_never_fired",
    "paired_twin",
    "baseline",
    "acceptance_populated",
    "early_stopped",
    "server_failure",
)
_RUN_OPTIONAL = frozenset(_RUN_KEYS[_RUN_KEYS.index("run_id") :])  # written only when set


@dataclass(frozen=True)
class RunSummary:
    """A run's summary.json as a value. `verdict` is derived from the tasks' gates and the failing events."""

    tasks: Mapping[str, TaskSummary] = field(default_factory=dict)
    events: Mapping[str, int] = field(default_factory=dict)  # counts by event type
    failing_events: int = 0
    elapsed_s: float | None = None
    model: str | None = None
    kv_cache: str | None = None
    spec: str | None = None
    world_size: int | None = None
    run_id: str | None = None
    run_dir: str | None = None
    test_id: str | None = None
    reused_generations: int | None = None
    reported_acceptance: Mapping[str, Any] | None = None
    faults_never_fired: tuple[str, ...] | None = None
    paired_twin: Mapping[str, Any] | None = None
    baseline: Mapping[str, Any] | None = None  # the lossless gate's baseline run: run, kind, label, audit
    acceptance_populated: Mapping[str, Any] | None = None
    early_stopped: bool | None = None
    server_failure: str | None = None  # why the server failed the run, one line (`failure`)
    # The verdict summary.json recorded (a summary read from disk only; None when built, or when the file has none).
    # Never the source of the verdict, except that a recorded FAIL this reader cannot explain (an older writer's
    # reason) stays FAIL.
    recorded_verdict: str | None = field(default=None, compare=False)
    extra: Mapping[str, Any] = field(default_factory=dict)
    key_order: tuple[str, ...] = field(default=(), compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "tasks", _frozen(self.tasks))
        object.__setattr__(self, "events", _frozen(self.events))
        object.__setattr__(self, "extra", _frozen(self.extra))

    @property
    def verdict(self) -> str:
        """FAIL when any task's gate FAILed or any failing event was recorded, else PASS."""
        failed = self.recorded_verdict == FAIL or self.failing_events or any(t.fails for t in self.tasks.values())
        return FAIL if failed else PASS

    @property
    def shown_verdict(self) -> str:
        """The verdict as every reader shows it: a PASS no gate with the power to fail passed is NO-GATE, and so is a
        PASS whose lossless gate could not judge (UNCALIBRATED)."""
        if self.verdict != PASS:
            return self.verdict
        if any(t.uncalibrated for t in self.tasks.values()):
            return NO_GATE
        return PASS if any(t.gates_passed() for t in self.tasks.values()) else NO_GATE

    @property
    def num_failed_requests(self) -> int:
        return sum(t.num_failed_requests or 0 for t in self.tasks.values())

    def with_task_gate(self, task: str, name: str, result: GateResult) -> RunSummary:
        """This summary with one more gate's result on one task (the run's verdict follows from it)."""
        return dataclasses.replace(self, tasks={**self.tasks, task: self.tasks[task].with_gate(name, result)})

    def with_task_accuracy(self, task: str, result: GateResult) -> RunSummary:
        """This summary with one task's accuracy test judged (`TaskSummary.with_accuracy`)."""
        return dataclasses.replace(self, tasks={**self.tasks, task: self.tasks[task].with_accuracy(result)})

    def replace(self, **changes: Any) -> RunSummary:
        return dataclasses.replace(self, **changes)

    def to_json(self) -> dict[str, Any]:
        values: dict[str, Any] = {"verdict": self.verdict, "tasks": {n: t.to_json() for n, t in self.tasks.items()}}
        for k in _RUN_KEYS:
            v = getattr(self, k)
            values[k] = dict(v) if isinstance(v, MappingProxyType) else list(v) if isinstance(v, tuple) else v
        values.update(self.extra)
        return _emit(values, self.key_order, _RUN_OPTIONAL, {"events": {}, "failing_events": 0})

    @classmethod
    def from_json(cls, record: Mapping[str, Any]) -> RunSummary:
        """From summary.json as any version of the pipeline wrote it (its shape checked by store.check_summary)."""
        known = {k: record[k] for k in _RUN_KEYS if k in record}
        if known.get("failing_events") is None:
            known.pop("failing_events", None)
        if isinstance(known.get("faults_never_fired"), list):
            known["faults_never_fired"] = tuple(known["faults_never_fired"])
        tasks = {n: TaskSummary.from_json(t) for n, t in (record.get("tasks") or {}).items() if isinstance(t, Mapping)}
        extra = {k: v for k, v in record.items() if k not in known and k not in ("verdict", "tasks")}
        verdict = record.get("verdict")
        return cls(
            tasks=tasks,
            **known,
            recorded_verdict=verdict if isinstance(verdict, str) else None,
            extra=extra,
            key_order=tuple(record),
        )


def as_run_summary(summary: RunSummary | Mapping[str, Any]) -> RunSummary:
    """A reader's argument as a RunSummary: the value itself, or summary.json's object read into one."""
    return summary if isinstance(summary, RunSummary) else RunSummary.from_json(summary)
