"""The tasks a run can name, collected from task-family modules, and the lm-eval task folder a run writes.

Each family module (`gsm8k`, `gpqa`) exposes `FAMILY` (a family.TaskFamily) and `TASKS` (its TaskSpecs):

  gsm8k               lm-eval `gsm8k` (5-shot from train, strict-match + flexible-extract)
  gpqa_diamond        lm-eval `gpqa_diamond_cot_zeroshot`, with our per-question seeded choice shuffle
  gpqa_diamond_aa     TensorRT-LLM's `gpqa_diamond_cot_zeroshot_aa` ("Answer: X"), same data and choice shuffle
  gsm8k_sampled       `gsm8k` with generation kwargs temperature=0.7 (lossless at temperature > 0: a spec-dec run
                      must emit the tokens a plain run of the same seeds samples); kept under its name for the
                      selftest's sampled mutants and earlier runs
  gsm8k_smoke         self-written GSM8K-format problems shipped with the project (offline demos only)
  gpqa_diamond_smoke  self-written GPQA-format questions (offline demos only)

More task modules (a module name, or the path of a .py file), separated by the platform's path separator, come from
the SPECDEC_EVAL_TASK_MODULES environment variable; they are registered the first time tasks are parsed, so that `run`,
a torchrun job's ranks and each side of `ab` see them alike. A family's references are <reference_name>.yaml (by default
its name) in its `reference_dir` (by default the package's references folder). With --apply-chat-template the same tasks
render through the model's chat template, few-shot as multi-turn.

Generation kwargs (lm-eval's --gen_kwargs) are applied here, in one place, for the
task YAMLs a run writes (`write_task_yamls`) and for the conditions it records and compares (`task_conditions`): a
task spec's own kwargs on its family's YAML, then the run's.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

from ...errors import UserError
from ...workers.loading.chat_template import ChatTemplateKwargs
from ..conditions.conditions import GenerationConditions, conditions_for
from ..conditions.gen_kwargs import GenKwargs
from . import gpqa, gpqa_aa, gsm8k
from .checked_family import CheckedFamily
from .data import DataSource
from .family import TaskFamily, TaskSpec

__all__ = ["FAMILIES", "TASKS", "TaskFamily", "TaskSpec", "family_named", "parse_tasks", "register"]

TASK_MODULES_ENV = "SPECDEC_EVAL_TASK_MODULES"
FAMILIES: dict[str, TaskFamily] = {}
TASKS: dict[str, TaskSpec] = {}
_LOADED: set[str] = set()  # entries of TASK_MODULES_ENV already registered in this process


def register(module: ModuleType, checked: bool = True) -> list[str]:
    """Add a task-family module's FAMILY and TASKS; returns the task names. A name already taken by another module
    is refused (a second module cannot silently replace a family or a task). `checked` (every module but our own):
    FAMILY's settings are checked now and its methods wrapped (`checked_family`), so that a module that raises
    or returns the wrong type ends a command in one line, not a traceback."""
    name = module.__name__
    family, specs = getattr(module, "FAMILY", None), getattr(module, "TASKS", ())
    if not isinstance(specs, list | tuple) or not all(isinstance(s, TaskSpec) for s in specs):
        raise UserError(f"task module {name}: TASKS must be a list or tuple of TaskSpecs, got {_shape(specs)}")
    if not isinstance(family, TaskFamily) or not specs:
        raise UserError(f"task module {name}: needs FAMILY (a TaskFamily) and TASKS (TaskSpecs)")
    if checked and not isinstance(family, CheckedFamily):
        wrapped = CheckedFamily(family, name)
        if any(s.family is not family for s in specs):
            raise UserError(
                f"task module {name}: task {', '.join(s.name for s in specs if s.family is not family)}"
                " not of its FAMILY"
            )
        specs = tuple(replace(s, family=wrapped) for s in specs)
        family = wrapped
    if _unwrapped(FAMILIES.get(family.name, family)) is not _unwrapped(family):
        raise UserError(f"task module {name}: family '{family.name}' is already registered")
    taken = [s.name for s in specs if _same_task(TASKS.get(s.name, s), s) is False or s.family is not family]
    if taken:
        raise UserError(f"task module {name}: task {', '.join(taken)} taken, or not of its FAMILY")
    FAMILIES[family.name] = family
    TASKS.update((s.name, s) for s in specs)
    return [s.name for s in specs]


def _unwrapped(family: TaskFamily) -> TaskFamily:
    return family._inner if isinstance(family, CheckedFamily) else family


def _same_task(a: TaskSpec, b: TaskSpec) -> bool:
    return replace(a, family=_unwrapped(a.family)) == replace(b, family=_unwrapped(b.family))


def _shape(value: object) -> str:
    if isinstance(value, list | tuple):
        bad = next((v for v in value if not isinstance(v, TaskSpec)), None)
        return f"a {type(value).__name__} holding a {type(bad).__name__}"
    return f"a {type(value).__name__}"


for _module in (gsm8k, gpqa, gpqa_aa):
    register(_module, checked=False)


def load_task_modules() -> None:
    """Register the modules named in SPECDEC_EVAL_TASK_MODULES (each once per process)."""
    for entry in filter(None, os.environ.get(TASK_MODULES_ENV, "").split(os.pathsep)):
        if entry not in _LOADED:
            register(_import(entry))
            _LOADED.add(entry)


def _import(entry: str) -> ModuleType:
    """A module by dotted name, or a .py file by path (imported under its file name, prefixed). Whatever importing
    it raises (a syntax error, an exception at its top level) is one UserError naming it."""
    inserted = None  # the sys.modules name of a file being imported, removed again if it fails
    try:
        if not entry.endswith(".py"):
            return importlib.import_module(entry)
        path = Path(entry).expanduser().resolve()
        name = f"specdec_eval_task_{path.stem}"
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None or not path.is_file():
            raise ImportError(f"no such file {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[inserted := name] = module  # dataclasses and pickling look a module up by name
        spec.loader.exec_module(module)
        return module
    except ImportError as e:
        reason = f"cannot import task module {entry!r} ({e})"
    except SyntaxError as e:
        reason = f"task module {entry!r} has a syntax error at {Path(e.filename or entry).name}:{e.lineno} ({e.msg})"
    except Exception as e:  # its top-level code raised: the module is not there, and the command cannot go on
        message = " ".join(str(e).split())[:160]
        reason = f"task module {entry!r} raised {type(e).__name__} on import" + (f": {message}" if message else "")
    if inserted is not None:
        sys.modules.pop(inserted, None)
    raise UserError(f"{TASK_MODULES_ENV}: {reason}")


def family_named(name: str) -> TaskFamily:
    """The registered family called name (a recorded result's `family`)."""
    load_task_modules()
    if name not in FAMILIES:
        raise UserError(f"unknown task family '{name}'; known: {', '.join(FAMILIES)}")
    return FAMILIES[name]


def task_for_lm_eval_name(lm_eval_name: str) -> TaskSpec | None:
    """The task whose lm-eval name this is (None: a task lm-eval loaded that is not ours)."""
    return next((s for s in TASKS.values() if s.lm_eval_name == lm_eval_name), None)


def parse_tasks(names: str | list[str]) -> list[TaskSpec]:
    load_task_modules()
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
    """Where the task's documents come from; local files are schema-checked here (`data_check`)."""
    return spec.family.source(spec, data_dir)


def max_fewshot(spec: TaskSpec, source: DataSource) -> int | None:
    """The most few-shot examples the task's source can give (None: unknown, a hub dataset)."""
    return spec.family.max_fewshot(source)


def stock_tasks() -> Path:
    """lm-eval's own tasks folder (the YAMLs our tasks include)."""
    import lm_eval.tasks

    return Path(lm_eval.tasks.__file__).parent


def _states_generation_kwargs(family: TaskFamily, stock: Path) -> bool:
    try:
        family.generation_kwargs(stock)
    except UserError:  # a family that leaves them to the YAML it includes (a task module of a user's)
        return False
    return True


def task_generation_kwargs(spec: TaskSpec, stock: Path, gen_kwargs: GenKwargs = GenKwargs()) -> dict[str, Any]:
    """The generation_kwargs a task's YAML states in a run: its family's, with the spec's and then the run's
    generation kwargs applied (UserError on a contradiction)."""
    return gen_kwargs.over(spec.gen_kwargs).apply(spec.family.generation_kwargs(stock))


def task_conditions(
    spec: TaskSpec,
    *,
    gen_kwargs: GenKwargs = GenKwargs(),
    apply_chat_template: bool = False,
    chat_template_kwargs: ChatTemplateKwargs = ChatTemplateKwargs(),
    num_fewshot: int | None = None,
    max_output_len: int | None = None,
    repeats: int = 1,
    stock: Path | None = None,
) -> GenerationConditions:
    """The conditions one task of a run is evaluated under (`GenerationConditions`); num_fewshot and
    max_output_len None: the task's own. `stock`: lm-eval's tasks folder (found when not given)."""
    stock = stock if stock is not None else stock_tasks()
    if gen_kwargs or spec.gen_kwargs or _states_generation_kwargs(spec.family, stock):
        base = spec.gen_kwargs.apply(spec.family.generation_kwargs(stock))  # UserError: a family that cannot take any
    else:
        base = {}  # a family leaving its kwargs to the YAML it includes: lm-eval's greedy default as far as we know
    return conditions_for(
        spec.family.variant or spec.family.name,
        base,
        gen_kwargs=gen_kwargs,
        num_fewshot=spec.num_fewshot if num_fewshot is None else num_fewshot,
        default_max_output_len=max_output_len or spec.max_output_len,
        apply_chat_template=apply_chat_template,
        chat_template_kwargs=chat_template_kwargs,
        repeats=repeats,
    )


def write_task_yamls(
    specs: list[TaskSpec],
    sources: dict[str, DataSource],
    folder: Path,
    seed: int,
    gen_kwargs: GenKwargs = GenKwargs(),
    repeats: int = 1,
) -> Path:
    """One YAML per task in `folder` (plus the hook modules its family's YAML points at); returns the folder.
    gen_kwargs: the run's generation kwargs, applied on each task's (its YAML then states them all: a YAML's
    generation_kwargs replace the included ones whole). repeats > 1: lm-eval's `repeats` (each request sent that many
    times; `repeats` says how those samples are scored)."""
    stock = stock_tasks()
    folder.mkdir(parents=True, exist_ok=True)
    for spec in specs:
        for name, text in spec.family.hook_files().items():
            (folder / name).write_text(text)
        text = spec.family.task_yaml(spec, sources[spec.name], stock, seed)
        extra: dict[str, Any] = {}
        if gen_kwargs or spec.gen_kwargs or _states_generation_kwargs(spec.family, stock):
            extra["generation_kwargs"] = task_generation_kwargs(spec, stock, gen_kwargs)
        if repeats > 1:
            extra["repeats"] = repeats
        if extra:
            text = text.rstrip("\n") + "\n" + yaml.safe_dump(extra, sort_keys=False)
        (folder / f"{spec.lm_eval_name}.yaml").write_text(text, encoding="utf-8")
    return folder
