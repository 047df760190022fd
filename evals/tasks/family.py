"""What the run pipeline asks of a task family, and a task as the user names it.

A task family (GSM8K, GPQA-Diamond, ...) is one module in evals/tasks/ that exposes `FAMILY` (a `TaskFamily`) and
`TASKS` (its `TaskSpec`s: the full set, a sampled variant, a shipped smoke set). The registry (`registry`) collects
those modules; everything else asks the family object (its data, its lm-eval YAML, how a sample is recorded and
sealed, its live score, its floor, its filters) and never tests a family's name. A new task is one module plus its
references: see `registry.register`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import yaml

from ...errors import UserError
from ..conditions.gen_kwargs import GenKwargs
from .data import DataSource

SMOKE_DIR = Path(__file__).parents[1] / "smoke"  # the shipped smoke sets, one folder per family name


class TaskFamily:
    """The defaults suit a family whose outputs may be stored readable and whose lm-eval filters are all it has;
    a family overrides what differs. Instances are stateless (one per module)."""

    name: ClassVar[str]  # its smoke folder, a run's `family`, its references file unless reference_name says
    variant: ClassVar[str | None] = None  # the lm-eval task whose prompt and scoring it reproduces (a reference's
    # `task_variant`); None: the family's name
    filters: ClassVar[tuple[str, ...]]  # the lm-eval filters whose exact_match make the score (their mean)
    max_output_len: ClassVar[int]  # generated tokens per sample by default
    floor: ClassVar[float] = 0.0  # the score of a model that gets nothing right (chance level for multiple choice)
    num_fewshot: ClassVar[int] = 0  # lm-eval's own default shots for the family
    sealed: ClassVar[bool] = False  # outputs can quote the question: records keep no text, token ids sealed
    acceptance_first: ClassVar[bool] = False  # `--populate-acceptance` prefers this family's acceptance length
    reference_dir: ClassVar[Path | None] = None  # where its references file lives; None: the shipped evals/references/
    reference_name: ClassVar[str | None] = None  # its references file <reference_name>.yaml; None: <name>.yaml

    def source(self, spec: TaskSpec, data_dir: str | None) -> DataSource:
        """Where the task's documents come from (local files schema-checked); raises UserError naming the ways."""
        raise NotImplementedError

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "name" in cls.__dict__:
            if cls.__dict__.get("reference_name") is None:
                cls.reference_name = cls.name
            if cls.__dict__.get("variant") is None:
                cls.variant = cls.name

    def task_yaml(self, spec: TaskSpec, source: DataSource, stock: Path, seed: int) -> str:
        """The lm-eval task config named spec.lm_eval_name, as YAML text, without `generation_kwargs` (the registry
        writes them: the family's own with the task's and the run's kwargs applied). stock: lm-eval's own tasks
        folder; seed: the run's evaluation seed (a family that shuffles choices uses it)."""
        raise NotImplementedError

    def generation_kwargs(self, stock: Path) -> dict[str, Any]:
        """The generation_kwargs of the lm-eval task the family reproduces (its YAML's, as lm-eval would send them):
        what generation kwargs are applied on. A family that does not say cannot take any."""
        raise UserError(f"task family {self.name} does not state its generation_kwargs: no generation kwargs apply")

    def hook_files(self) -> dict[str, str]:
        """Python files written beside the YAMLs (a YAML's `!function` resolves next to itself): name -> text."""
        return {}

    def max_fewshot(self, source: DataSource) -> int | None:
        """The most few-shot examples the source can give (None: unknown, e.g. a hub dataset)."""
        return source.num_rows.get("train")

    def target(self, lm_eval_target: str) -> str:
        """What a sample record keeps as its target (lm-eval's `target` of the document)."""
        return lm_eval_target

    def extracted(self, filtered: str) -> str:
        """What a sample record keeps of a filter's extraction (a sealed family keeps no quoted text)."""
        return filtered

    def own_extraction(self, output: str, filter_name: str, target: str) -> tuple[str, bool] | None:
        """Our own (extracted, correct) for one filter on an output, cross-checked against lm-eval's on every
        sample; None: the family has no filters of its own and lm-eval's stand alone."""
        return None

    def live_correct(self, output: str, doc: Any) -> bool | None:
        """A progress-line hint of whether an output answers its document (None: cannot say)."""
        return None

    def __repr__(self) -> str:
        return f"<task family {self.name}>"


def stock_generation_kwargs(path: Path) -> dict[str, Any]:
    """The generation_kwargs of an lm-eval task YAML (its own, else those of the file it includes). lm-eval's
    `!function` tags are read as nothing: only plain keys matter here."""
    loader = type("_TagBlindLoader", (yaml.SafeLoader,), {})
    loader.add_multi_constructor("!", lambda *_: None)
    config = yaml.load(path.read_text(encoding="utf-8"), Loader=loader) or {}  # noqa: S506  a SafeLoader subclass
    if "generation_kwargs" in config:
        return dict(config["generation_kwargs"] or {})
    if config.get("include"):
        return stock_generation_kwargs(path.parent / config["include"])
    return {}


@dataclass(frozen=True)
class TaskSpec:
    name: str  # what the user types
    family: TaskFamily  # which references, filters, extraction and sealing apply
    smoke: bool = False  # a shipped self-written set (SMOKE_DIR/<family>): offline demos, never scored
    gen_kwargs: GenKwargs = GenKwargs()  # the task's own generation kwargs on its YAML's (a named variant's)

    @property
    def lm_eval_name(self) -> str:
        return f"specdec_{self.name}"

    @property
    def temperature(self) -> float:
        """> 0: the task's own kwargs sample (and no greedy reference applies to it)."""
        return float(self.gen_kwargs.get("temperature", 0.0))

    @property
    def max_output_len(self) -> int:
        return self.family.max_output_len

    @property
    def floor(self) -> float:
        return self.family.floor

    @property
    def num_fewshot(self) -> int:
        return self.family.num_fewshot

    @property
    def smoke_dir(self) -> Path:
        return SMOKE_DIR / self.family.name
