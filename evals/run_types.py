"""The values every stage of a run shares: what to evaluate (`EvalOptions`), a run's plan (`RunPlan`: the evaluation
and where and how it is recorded), and one task's evaluated result (`TaskResult`). The pipeline builds them, the gates
judge them, the lossless gate and the sequential designs read them; none of those import each other for them.
The `run` options of the first two are declared on their fields (`option_fields`).

A leaf: it imports the task registry (a task's definition) and the store's default folder, nothing that runs."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from ..option_fields import flag
from ..results import store
from ..results.run_summary import GateResult
from ..results.sample_record import SampleRecord
from ..workers.loading.chat_template import ChatTemplateKwargs
from .conditions.conditions import GenerationConditions
from .conditions.gen_kwargs import GenKwargs
from .conditions.reference import ACCEPT_FLAG
from .conditions.repeats import MAX_REPEATS
from .tasks.registry import TASKS, TaskSpec, parse_tasks, task_conditions
from .tasks.subsets import HOW

if TYPE_CHECKING:
    from .gates.references import Reference

# Top alternatives recorded per output token for the lossless gate's margins (`margins`): 5 is the
# most OpenAI's completions API returns (`logprobs` <= 5), so every server can give the same record our engine keeps.
LOSSLESS_TOP_K = 5
MAX_FEWSHOT = 64  # far past any prompt that fits a context; the task's own data bounds it further at run time
SAMPLES = tuple(h for h in HOW if h != "all")  # what --sample takes (`subsets`)
EVAL, STORE, CONDITIONS = "Evaluation", "Run store", "Generation conditions"  # the groups of `--help`


def _gate_list(value: str) -> tuple[str, ...]:
    """`--gate a,b=0.2` as ("a", "b=0.2")."""
    return tuple(p.strip() for p in value.split(",") if p.strip())


@dataclass(frozen=True)
class EvalOptions:
    """What a run evaluates, and how it decides: each field with a flag is a `run` option, declared here once (its
    default is the flag's). A new evaluation option is one field."""

    tasks: list[TaskSpec] = field(
        metadata=flag(
            "--tasks",
            "-t",
            type=str,
            convert=parse_tasks,
            default="gsm8k",
            group=EVAL,
            help=f"Comma-separated, from: {', '.join(TASKS)}.",
        )
    )
    data_dir: str | None = field(
        default=None,
        metadata=flag(
            "--data-dir",
            group=EVAL,
            help="Folder with gsm8k/ and gpqa/ data (else $SPECDEC_EVAL_DATA, else the Hugging Face cache/hub).",
        ),
    )
    limit: int | None = field(
        default=None, metadata=flag("--limit", min=1, group=EVAL, help="First N documents of each task (default: all).")
    )
    num_fewshot: int | None = field(
        default=None,
        metadata=flag(  # None: the task family's own
            "--num-fewshot", min=0, max=MAX_FEWSHOT, group=EVAL, help="Override the task's shots (GSM8K 5, GPQA 0)."
        ),
    )
    max_output_len: int | None = field(
        default=None,
        metadata=flag(  # None: the task's own
            "--max-output-len", min=1, group=EVAL, help="Generated tokens per sample (GSM8K 256, GPQA 512)."
        ),
    )
    apply_chat_template: bool = field(
        default=False,
        metadata=flag(
            "--apply-chat-template",
            group=EVAL,
            help="Render prompts with the model's chat template, few-shot as multi-turn.",
        ),
    )
    seed: int = field(
        default=0,
        metadata=flag(  # lm-eval's random_seed, and a task's seeded choice shuffle (GPQA's)
            "--eval-seed", min=0, param="eval_seed", group=EVAL, help="lm-eval random seed and the GPQA choice shuffle."
        ),
    )
    no_reference: bool = field(
        default=False,
        metadata=flag(
            "--no-reference",
            group=EVAL,
            help="Only report scores; no reference lookup (accuracy, nor acceptance "
            "unless --acceptance-refs names a file), no gate.",
        ),
    )
    model_key: str | None = field(
        default=None,
        metadata=flag("--model-key", group=EVAL, help="Reference key of the model (default: derived from --model)."),
    )
    sample: str = field(
        default="first",
        metadata=flag(  # `subsets`
            "--sample",
            choices=lambda: SAMPLES,
            group=EVAL,
            help="Which documents --limit takes: first (the first N) or random (a seeded random subset; "
            "first-N subsets "
            "are easier than the full set).",
        ),
    )
    early_stop: bool = field(
        default=False,
        metadata=flag(  # `early_stop`
            "--early-stop",
            group=EVAL,
            help="Sequential verdict: documents in a seeded random order, a look after each batch; stop as soon as the "
            "accuracy test (alpha and power kept), the lossless gate (first divergent sample) or the acceptance "
            "tripwire decides.",
        ),
    )
    early_stop_batch: int = field(
        default=64,
        metadata=flag("--early-stop-batch", min=1, group=EVAL, help="Documents per look under --early-stop."),
    )
    acceptance_rtol: float = field(
        default=0.05,
        metadata=flag(
            "--acceptance-rtol",
            min=0.0,
            max=0.99,
            group=EVAL,
            help="Relative tolerance of the acceptance-length gate around ref_al, in either direction.",
        ),
    )
    acceptance_refs: str | None = field(
        default=None,
        metadata=flag(
            "--acceptance-refs",
            group=EVAL,
            help="Acceptance-length references file (TensorRT-LLM's layout; default: the shipped "
            "evals/references/acceptance_length.yaml).",
        ),
    )
    stop_file: str | None = field(
        default=None,
        metadata=flag(  # a side of a sequential `ab`: it stops the side
            "--ab-stop-file", param="ab_stop_file", hidden=True, help="A side of a sequential `ab` (set by ab)."
        ),
    )
    gen_kwargs: str | None = field(
        default=None,
        metadata=flag(  # `gen_kwargs`
            "--gen-kwargs",
            parse=GenKwargs.parse,
            group=CONDITIONS,
            help="lm-eval's generation kwargs on each task's own, e.g. temperature=1.0,top_p=1.0 (also top_k, seed, "
            "do_sample, max_gen_toks). A temperature > 0 samples (lm-eval would keep the task's do_sample: false "
            "and decode greedily); seed is the base of each sample's seed. Both sides and the baseline take "
            "them.",
        ),
    )
    chat_template_kwargs: str | None = field(
        default=None,
        metadata=flag(  # `chat_template`
            "--chat-template-kwargs",
            parse=ChatTemplateKwargs.parse,
            group=CONDITIONS,
            help='A JSON object of chat-template variables, e.g. \'{"reasoning_effort": "medium"}\': rendered into '
            "the chat template (needs --apply-chat-template), sent as chat_template_kwargs in an endpoint's chat "
            "requests.",
        ),
    )
    repeats: int = field(
        default=1,
        metadata=flag(  # `repeats`, stats.clustered
            "--repeats",
            min=1,
            max=MAX_REPEATS,
            group=CONDITIONS,
            help="Samples per document at temperature > 0, each with its own seed; the score is the mean of the "
            "per-document means, its error clustered by document. Greedy runs take 1.",
        ),
    )
    accept_condition_mismatch: bool = field(
        default=False,
        metadata=flag(  # `reference`
            ACCEPT_FLAG,
            group=CONDITIONS,
            help="Judge the accuracy gate against the matched reference although its stated conditions differ from "
            "this run's (otherwise NO-GATE, the differences named); the run and its report say so.",
        ),
    )
    logprobs: int | None = LOSSLESS_TOP_K  # per output token: its logprob and top alternatives (lossless margins)

    def max_output_for(self, spec: TaskSpec) -> int:
        return self.max_output_len or spec.max_output_len

    @property
    def generation_kwargs(self) -> GenKwargs:
        """--gen-kwargs as a value (checked where it was given)."""
        return GenKwargs.parse(self.gen_kwargs)

    @property
    def template_kwargs(self) -> ChatTemplateKwargs:
        """--chat-template-kwargs as a value (none: empty)."""
        text = self.chat_template_kwargs
        return ChatTemplateKwargs.parse(text) if text else ChatTemplateKwargs()

    def conditions_for(self, spec: TaskSpec) -> GenerationConditions:
        """The conditions this run evaluates `spec` under (UserError on a contradiction: repeats with greedy
        decoding, chat-template kwargs without the template, kwargs a task cannot take)."""
        return task_conditions(
            spec,
            gen_kwargs=self.generation_kwargs,
            apply_chat_template=self.apply_chat_template,
            chat_template_kwargs=self.template_kwargs,
            num_fewshot=self.num_fewshot,
            max_output_len=self.max_output_len,
            repeats=self.repeats,
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (a torchrun job's payload); tasks by name."""
        return {**{k: v for k, v in asdict(self).items() if k != "tasks"}, "tasks": [t.name for t in self.tasks]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EvalOptions:
        return cls(**{**d, "tasks": parse_tasks(list(d["tasks"]))})


BASELINE_MODES = ("paired", "separate")  # what --baseline takes besides a recorded run


@dataclass(frozen=True)
class RunPlan:
    """Everything about a run that is not the engine: what to evaluate, where to record it, and what its lossless
    gate compares with. Each field with a flag is a `run` option, declared here once."""

    options: EvalOptions
    out: str = field(
        default=store.DEFAULT_ROOT,
        metadata=flag("--out", group=STORE, help="Runs folder: each run is written to OUT/<run id>/."),
    )
    resume: bool | None = field(
        default=None,
        metadata=flag(  # None: resume an unfinished run of this configuration
            "--resume/--fresh",
            group=STORE,
            help="Resume the newest unfinished run of this exact configuration, or start afresh (default: resume when "
            "one exists).",
        ),
    )
    baseline: str = field(
        default="paired",
        metadata=flag(  # see BASELINE_MODES
            "--baseline",
            group=EVAL,
            help="The lossless gate's baseline of a spec-dec run: 'paired' (decoded beside the run from one "
            "prefill per "
            "prompt, recorded as its own run; our engine), 'separate' (a run of its own first), or a recorded run "
            "(id or folder) to compare with.",
        ),
    )
    populate_acceptance: bool = field(
        default=False,
        metadata=flag(
            "--populate-acceptance",
            group=EVAL,
            help="Write this run's acceptance length as the reference of its test id (ref_al = AL, min_al = 0.95 AL), "
            "as TensorRT-LLM's populate switch does; only from a clean, passing run (no --inject, no FAILed gate, "
            "failing event or failed request), saying how many documents it rests on.",
        ),
    )
    control: bool | None = field(
        default=None,
        metadata=flag(  # `control`; None: when needed
            "--control/--no-control",
            group=EVAL,
            help="The lossless gate's noise floor outside float32: decode the plain side again at another batch shape "
            "(our engine: max batch size 1; an endpoint: the baseline server at concurrency 1) and judge each "
            "divergence's logit margin against what that control measured. Default: made for a spec-dec run in a "
            "dtype that is not exact when none is recorded; reused.",
        ),
    )

    gates: tuple[str, ...] | None = field(  # the opt-in gates asked for (NAME[=SETTING]); `run` checks them
        default=None,
        metadata=flag(
            "--gate",
            type=str | None,
            convert=_gate_list,
            group=EVAL,
            help="Opt-in gates to add to the run's verdict, comma-separated NAME[=SETTING] (none by default; an "
            "unknown name is refused with the list of opt-in gates and their settings).",
        ),
    )

    @property
    def baseline_run(self) -> str | None:
        """The recorded run `--baseline RUN` names (None: a mode)."""
        return None if self.baseline in BASELINE_MODES else self.baseline

    @property
    def baseline_mode(self) -> str:
        return self.baseline if self.baseline in BASELINE_MODES else "separate"

    def to_dict(self) -> dict[str, Any]:
        return {
            "options": self.options.to_dict(),
            "out": self.out,
            "resume": self.resume,
            "baseline": self.baseline,
            "populate_acceptance": self.populate_acceptance,
            "control": self.control,
            **({"gates": list(self.gates)} if self.gates else {}),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunPlan:
        return cls(
            EvalOptions.from_dict(d["options"]),
            d["out"],
            d["resume"],
            d.get("baseline", "paired"),
            d.get("populate_acceptance", False),
            d.get("control"),
            tuple(d["gates"]) if d.get("gates") else None,
        )


@dataclass(frozen=True)
class TaskResult:
    """One task of one evaluation, scored and judged by its accuracy gate (gates.accuracy_gate `accuracy_gate`)."""

    task: str
    family: str
    num_samples: int
    filter_scores: dict[str, float]  # 0-100
    score: float  # mean over filters, 0-100
    reference: Reference | None
    accuracy: GateResult  # PASS | FAIL | NO-GATE | REPORT (no reference); reason: the test's report
    samples: list[SampleRecord] = field(default_factory=list)
    acceptance: dict[str, Any] | None = None
    acceptance_requests: list[tuple[int, int]] = field(default_factory=list)  # (cycles, accepted) per request
    acceptance_positions: list[tuple[int, list[int]]] = field(default_factory=list)  # (cycles, per position) each
    num_failed_requests: int = 0
    data_origin: str = ""
    filter_mismatches: list[dict[str, Any]] = field(default_factory=list)  # a family's own filters vs lm-eval's
    n_total: int | None = None  # documents the task has (samples can be fewer: a subset or an early stop)
    subset: dict[str, Any] | None = None  # the SubsetPlan (order) of the run, when it is not every document
    stopped: dict[str, Any] | None = None  # where and why an early-stopped task stopped
    conditions: dict[str, Any] | None = None  # the task's GenerationConditions (evals/conditions/), for the record
    clustered: dict[str, Any] | None = None  # several samples per document: the ClusteredScore (stats.clustered)
