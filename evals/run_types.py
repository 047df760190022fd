"""The values every stage of a run shares: what to evaluate (`EvalOptions`), a run's plan (`RunPlan`: the evaluation
and where and how it is recorded), and one task's evaluated result (`TaskResult`). The pipeline builds them, the gates
judge them, the lossless gate and the sequential designs read them; none of those import each other for them.

A leaf: it imports the task registry (a task's definition) and the store's default folder, nothing that runs."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from ..results import store
from .tasks.registry import TaskSpec, parse_tasks

if TYPE_CHECKING:
    from .gates.references import Reference

# Top alternatives recorded per output token for the lossless gate's margins (evals/lossless/margins.py): 5 is the
# most OpenAI's completions API returns (`logprobs` <= 5), so every server can give the same record our engine keeps.
LOSSLESS_TOP_K = 5


@dataclass
class EvalOptions:
    tasks: list[TaskSpec]
    data_dir: str | None = None
    limit: int | None = None
    num_fewshot: int | None = None  # None: the task family's own
    max_output_len: int | None = None  # None: the task's own
    apply_chat_template: bool = False
    seed: int = 0  # lm-eval random_seed, and any seeded choice shuffle of a task (GPQA's)
    no_reference: bool = False
    model_key: str | None = None
    sample: str = "first"  # first | random: which documents --limit takes (random: a seeded random subset)
    early_stop: bool = False  # sequential verdicts (evals/sequential/early_stop.py): documents in a seeded random order
    early_stop_batch: int = 64  # documents per look
    acceptance_rtol: float = 0.05  # the acceptance-length gate's two-sided tolerance
    acceptance_refs: str | None = None  # the acceptance-length references file (default: the shipped one)
    stop_file: str | None = None  # a side of a sequential `ab`: report each batch, stop when this file appears
    logprobs: int | None = LOSSLESS_TOP_K  # per output token: its logprob and top alternatives (lossless margins)

    def max_output_for(self, spec: TaskSpec) -> int:
        return self.max_output_len or spec.max_output_len

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (a torchrun job's payload); tasks by name."""
        return {**{k: v for k, v in asdict(self).items() if k != "tasks"}, "tasks": [t.name for t in self.tasks]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EvalOptions:
        return cls(**{**d, "tasks": parse_tasks(list(d["tasks"]))})


@dataclass
class RunPlan:
    """Everything about a run that is not the engine: what to evaluate and where to record it."""

    options: EvalOptions
    out: str = store.DEFAULT_ROOT
    resume: bool | None = None  # None: resume an unfinished run of this configuration when there is one
    baseline_run: str | None = None  # the lossless gate's baseline (a run id or folder); None: look it up by key
    populate_acceptance: bool = False  # write the run's acceptance length as its test id's reference
    control: bool | None = None  # the lossless noise-floor control (evals/lossless/control.py); None: when needed

    def to_dict(self) -> dict[str, Any]:
        return {"options": self.options.to_dict(), "out": self.out, "resume": self.resume,
                "baseline_run": self.baseline_run, "populate_acceptance": self.populate_acceptance,
                "control": self.control}  # fmt: skip

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunPlan:
        return cls(EvalOptions.from_dict(d["options"]), d["out"], d["resume"], d.get("baseline_run"),
                   d.get("populate_acceptance", False), d.get("control"))  # fmt: skip


@dataclass
class TaskResult:
    task: str
    family: str
    num_samples: int
    filter_scores: dict[str, float]  # 0-100
    score: float  # mean over filters, 0-100
    reference: Reference | None
    threshold: float | None
    theta: float | None
    verdict: str  # PASS | FAIL | NO-GATE | REPORT (no reference)
    report: str
    samples: list[dict[str, Any]] = field(default_factory=list)
    acceptance: dict[str, Any] | None = None
    acceptance_requests: list[tuple[int, int]] = field(default_factory=list)  # (cycles, accepted) per request
    acceptance_positions: list[tuple[int, list[int]]] = field(default_factory=list)  # (cycles, per position) each
    num_failed_requests: int = 0
    data_origin: str = ""
    filter_mismatches: list[dict[str, Any]] = field(default_factory=list)  # a family's own filters vs lm-eval's
    n_total: int | None = None  # documents the task has (samples can be fewer: a subset or an early stop)
    subset: dict[str, Any] | None = None  # the SubsetPlan (order) of the run, when it is not every document
    stopped: dict[str, Any] | None = None  # where and why an early-stopped task stopped
