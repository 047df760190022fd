"""Our tasks, defined as lm-eval task YAMLs that `include:` lm-eval's own configs (so prompts, filters and the
metric are lm-eval's) and only swap the data source. The YAMLs are written into a run-local folder at run
time, because the data paths are only known then.

  gsm8k               lm-eval `gsm8k` (5-shot from train, strict-match + flexible-extract)
  gpqa_diamond        lm-eval `gpqa_diamond_cot_zeroshot`, with our per-question seeded choice shuffle
  gsm8k_sampled       `gsm8k` sampled at temperature 0.7 (lossless at temperature > 0: a spec-dec run must emit the
                      tokens a plain run of the same seeds samples); never scored against the greedy references
  gsm8k_smoke         self-written GSM8K-format problems shipped with the project (offline demos only)
  gpqa_diamond_smoke  self-written GPQA-format questions (offline demos only)

With --apply-chat-template the same tasks render through the model's chat template, few-shot as multi-turn.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ...workers.errors import UserError
from .data import DataSource, checked_gpqa, checked_gsm8k, gpqa_source, gsm8k_source

SMOKE_DIR = Path(__file__).parents[1] / "smoke"


@dataclass(frozen=True)
class TaskSpec:
    name: str  # what the user types
    family: str  # gsm8k | gpqa_diamond: which reference file, filters and extraction apply
    max_output_len: int  # TensorRT-LLM uses 256 for GSM8K; GPQA CoT needs room to reason
    floor: float  # the score of a model that gets nothing right: 0, or chance level for 4 choices
    smoke: bool = False
    num_fewshot: int = 0  # lm-eval's own default for the task
    temperature: float = 0.0  # > 0: sampled (lm-eval's do_sample), and no greedy reference applies

    @property
    def lm_eval_name(self) -> str:
        return f"specdec_{self.name}"


TASKS = {
    t.name: t
    for t in (
        TaskSpec("gsm8k", "gsm8k", 256, 0.0, num_fewshot=5),
        TaskSpec("gpqa_diamond", "gpqa_diamond", 512, 25.0),
        TaskSpec("gsm8k_sampled", "gsm8k", 256, 0.0, num_fewshot=5, temperature=0.7),
        TaskSpec("gsm8k_smoke", "gsm8k", 256, 0.0, smoke=True, num_fewshot=5),
        TaskSpec("gpqa_diamond_smoke", "gpqa_diamond", 512, 25.0, smoke=True),
    )
}
FILTERS = {"gsm8k": ("strict-match", "flexible-extract"), "gpqa_diamond": ("strict-match", "flexible-extract")}


def parse_tasks(names: str | list[str]) -> list[TaskSpec]:
    items = names.split(",") if isinstance(names, str) else [n for x in names for n in x.split(",")]
    specs = []
    for name in (n.strip() for n in items if n.strip()):
        if name not in TASKS:
            raise UserError(f"unknown task '{name}'; known: {', '.join(TASKS)}")
        if TASKS[name] not in specs:
            specs.append(TASKS[name])
    if not specs:
        raise UserError("no task given; e.g. --tasks gsm8k,gpqa_diamond")
    return specs


def source_for(spec: TaskSpec, data_dir: str | None) -> DataSource:
    """Where the task's documents come from; local files are schema-checked here (evals/tasks/data_check.py)."""
    if spec.smoke:
        folder = SMOKE_DIR / spec.family
        if spec.family == "gsm8k":
            files = {s: str(folder / f"{s}.jsonl") for s in ("train", "test")}
            return checked_gsm8k(DataSource(f"smoke:{folder}", "json", files))
        return checked_gpqa(DataSource(f"smoke:{folder}", "csv", {"train": str(folder / "gpqa_diamond.csv")}))
    return gsm8k_source(data_dir) if spec.family == "gsm8k" else gpqa_source(data_dir)


def max_fewshot(spec: TaskSpec, source: DataSource) -> int | None:
    """The most few-shot examples the task's source can give (None: unknown, a hub dataset). GSM8K draws them
    from its train split; GPQA from its only split, leaving out the question asked."""
    rows = source.num_rows.get("train")
    if rows is None:
        return None
    return rows - 1 if spec.family == "gpqa_diamond" else rows


def write_task_yamls(specs: list[TaskSpec], sources: dict[str, DataSource], folder: Path, gpqa_seed: int) -> Path:
    """One YAML per task in `folder` (plus the hook module the GPQA YAML points at); returns the folder."""
    import lm_eval.tasks

    stock = Path(lm_eval.tasks.__file__).parent
    folder.mkdir(parents=True, exist_ok=True)
    # `!function name.attr` resolves next to the YAML that holds it: a two-line module forwards to ours.
    (folder / "specdec_hooks.py").write_text("from specdec_eval.evals.tasks.gpqa import load_dataset  # noqa: F401\n")
    for spec in specs:
        src = sources[spec.name]
        if spec.family == "gsm8k":
            config = _gsm8k_yaml(stock, spec, src)
            text = yaml.safe_dump(config, sort_keys=False)
        else:
            config = _gpqa_yaml(stock, spec, src, gpqa_seed)
            # A tag yaml.safe_dump cannot write: lm-eval's loader turns it into the callable.
            text = yaml.safe_dump(config, sort_keys=False) + "custom_dataset: !function specdec_hooks.load_dataset\n"
        (folder / f"{spec.lm_eval_name}.yaml").write_text(text, encoding="utf-8")
    return folder


def _gsm8k_yaml(stock: Path, spec: TaskSpec, src: DataSource) -> dict[str, Any]:
    config: dict[str, Any] = {"include": str(stock / "gsm8k" / "gsm8k.yaml"), "task": spec.lm_eval_name, "tag": []}
    if src.hub is not None:
        config.update(dataset_path=src.hub[0], dataset_name=src.hub[1])
    else:
        config.update(dataset_path=src.builder, dataset_name=None, dataset_kwargs={"data_files": src.files})
    if spec.temperature:  # a YAML's generation_kwargs replace the included ones whole: keep its stop strings
        stock_kwargs = yaml.safe_load((stock / "gsm8k" / "gsm8k.yaml").read_text())["generation_kwargs"]
        config["generation_kwargs"] = {**stock_kwargs, "do_sample": True, "temperature": spec.temperature}
    return config


def _gpqa_yaml(stock: Path, spec: TaskSpec, src: DataSource, seed: int) -> dict[str, Any]:
    return {
        "include": str(stock / "gpqa" / "cot_zeroshot" / "_gpqa_cot_zeroshot_yaml"),
        "task": spec.lm_eval_name,
        "tag": [],
        "dataset_path": "specdec-gpqa",  # unused: custom_dataset supplies the docs, in memory
        "dataset_name": None,
        "process_docs": None,  # the stock one reshuffles with the global RNG on every call; ours is seeded
        "dataset_kwargs": {
            "builder": src.builder,
            "path": src.files.get("train"),
            "hub": list(src.hub) if src.hub else None,
            "shuffle_seed": seed,
        },
    }
