"""A task family from a module the user names (SPECDEC_EVAL_TASK_MODULES), with every call into its code turned
into one line when it fails.

The shipped families are ours: a bug there is ours and may show its traceback. A user's module is code we did not
write, run deep inside a run (the data source before the run, the lm-eval YAML as the evaluation starts, the
live score on every progress line, the record of every sample); an exception there surfaced as a traceback from
the pipeline's depths. Wrapped, any exception (or a value of the wrong type) becomes a UserError naming the
module, the method and the exception type: `specdec-eval` prints it in one line and exits 2."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from ...errors import UserError
from .data import DataSource
from .family import TaskFamily, TaskSpec

# The TaskFamily interface: class-level settings copied onto the wrapper, and methods called through it.
SETTINGS = (
    "name",
    "variant",
    "reference_name",
    "filters",
    "max_output_len",
    "floor",
    "num_fewshot",
    "sealed",
    "acceptance_first",
    "reference_dir",
)
METHODS = ("source", "task_yaml", "hook_files", "max_fewshot", "target", "extracted", "own_extraction", "live_correct")
# What each method must return (None: anything, its caller checks); a wrong type is the module's error too.
RETURNS: dict[str, tuple[type, ...] | None] = {
    "source": (DataSource,),
    "task_yaml": (str,),
    "hook_files": (dict,),
    "max_fewshot": (int, type(None)),
    "target": (str,),
    "extracted": (str,),
    "own_extraction": (tuple, type(None)),
    "live_correct": (bool, type(None)),
}


class CheckedFamily(TaskFamily):
    """Delegates to a user's family; its settings are checked once (at registration), its methods on every call."""

    def __init__(self, inner: TaskFamily, module: str) -> None:
        self._inner, self._module = inner, module
        for name in SETTINGS:
            try:
                value = getattr(inner, name)
            except Exception as exc:  # a missing class attribute, or a property that raises
                raise UserError(f"task module {module}: FAMILY.{name} cannot be read ({_said(exc)})") from None
            setattr(self, name, value)
        if not isinstance(self.name, str) or not self.name:
            raise UserError(f"task module {module}: FAMILY.name must be a non-empty string, got {self.name!r}")
        if not isinstance(self.filters, tuple | list) or not all(isinstance(f, str) for f in self.filters):
            raise UserError(f"task module {module}: FAMILY.filters must be a tuple of filter names")
        if isinstance(self.max_output_len, bool) or not isinstance(self.max_output_len, int) or self.max_output_len < 1:
            raise UserError(f"task module {module}: FAMILY.max_output_len must be a positive integer")
        for setting in ("variant", "reference_name"):  # both default to the name (TaskFamily.__init_subclass__)
            if not isinstance(getattr(self, setting), str) or not getattr(self, setting):
                raise UserError(f"task module {module}: FAMILY.{setting} must be a non-empty string")
        if self.reference_dir is not None and not isinstance(self.reference_dir, str | Path):
            raise UserError(f"task module {module}: FAMILY.reference_dir must be a path or None")

    def _call(self, method: str, *args: Any) -> Any:
        try:
            value = getattr(self._inner, method)(*args)
        except UserError as exc:  # the module's own one-line reason: kept, with where it came from
            raise UserError(f"task module {self._module}: {exc}") from None
        except Exception as exc:
            raise UserError(f"task module {self._module}: FAMILY.{method}() raised {_said(exc)}") from None
        expected = RETURNS[method]
        if expected is not None and (
            not isinstance(value, expected) or isinstance(value, bool) and bool not in expected
        ):
            names = " or ".join("None" if t is type(None) else t.__name__ for t in expected)
            raise UserError(
                f"task module {self._module}: FAMILY.{method}() returned a {type(value).__name__}, not {names}"
            )
        return value

    def source(self, spec: TaskSpec, data_dir: str | None) -> DataSource:
        return self._call("source", spec, data_dir)

    def task_yaml(self, spec: TaskSpec, source: DataSource, stock: Path, seed: int) -> str:
        text = self._call("task_yaml", spec, source, stock, seed)
        problem = yaml_problem(text)
        if problem is not None:  # lm-eval would fail later with a KeyError traceback
            raise UserError(f"task module {self._module}: FAMILY.task_yaml() returned YAML {problem}")
        return text

    def hook_files(self) -> dict[str, str]:
        return self._call("hook_files")

    def max_fewshot(self, source: DataSource) -> int | None:
        return self._call("max_fewshot", source)

    def target(self, lm_eval_target: str) -> str:
        return self._call("target", lm_eval_target)

    def extracted(self, filtered: str) -> str:
        return self._call("extracted", filtered)

    def own_extraction(self, output: str, filter_name: str, target: str) -> tuple[str, bool] | None:
        return self._call("own_extraction", output, filter_name, target)

    def live_correct(self, output: str, doc: Any) -> bool | None:
        return self._call("live_correct", output, doc)

    def __getattr__(self, name: str) -> Any:  # anything beyond the interface the module's own code reads
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._inner, name)

    def __repr__(self) -> str:
        return f"<task family {self.name} from {self._module}>"


class _AnyTagLoader(yaml.SafeLoader):
    """lm-eval's task YAML as data: its tags (`!function module.name`) read as plain values."""


_AnyTagLoader.add_multi_constructor("!", lambda loader, suffix, node: None)


def yaml_problem(text: str) -> str | None:
    """Why a task YAML cannot be lm-eval's task (it does not parse, or names no task), in words; None when it can."""
    try:
        data = yaml.load(text, Loader=_AnyTagLoader)  # noqa: S506 - a SafeLoader that ignores tags
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        return f"that does not parse ({where}{getattr(exc, 'problem', None) or exc})"
    if not isinstance(data, dict) or not isinstance(data.get("task"), str):
        return "without a task name (a str under `task:`)"
    return None


def _said(exc: BaseException) -> str:
    """An exception in one line, its message cut: a module's message could hold anything (even a question)."""
    message = " ".join(str(exc).split())[:160]
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__
