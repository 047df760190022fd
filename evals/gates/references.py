"""Reference accuracies in YAML, one file per task: model key -> list of entries, first match wins.

An entry matches when every selection key agrees with the run, exactly as TensorRT-LLM's harness looks them
up: a key absent from the entry stands for its default (dtype "auto", everything else none). Keys of ours are
wildcards when absent: the KV-cache manager version (v1 and v2 must give the same outputs), the shots and
output length (the runner always passes them; an entry names them only when it was recorded with other values),
and whether the prompts went through the chat template (an entry recorded with it names it).
An entry may override alpha, beta, sigma, num_samples and higher_is_better; `command` and `source` record
where the number came from. `score_filter` (a scoring key) names the one lm-eval filter the reference was scored
with, where it is not the mean of the task's filters (TensorRT-LLM scores GPT-OSS's GSM8K on flexible-extract
alone: its strict-match score is some 30 points lower).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ...errors import UserError
from ...user_files import read_limited
from .hypothesis import HypothesisTest

REFERENCE_DIR = Path(__file__).parents[1] / "references"
# key -> value an entry stands for when it does not name the key
SELECTION_DEFAULTS: dict[str, Any] = {
    "dtype": "auto",
    "quant_algo": None,
    "kv_cache_quant_algo": None,
    "spec_dec_algo": None,
    "extra_acc_spec": None,
}
WILDCARD_KEYS = ("kv_cache", "num_fewshot", "max_output_len", "apply_chat_template")
OVERRIDES = ("alpha", "beta", "sigma", "num_samples", "higher_is_better", "floor")
SCORING_KEYS = ("score_filter",)  # how the run's score must be computed to compare with this entry


@dataclass
class Reference:
    task: str
    model_key: str
    accuracy: float
    entry: dict[str, Any]

    @property
    def score_filter(self) -> str | None:
        """The lm-eval filter the reference was scored with; None: the mean of the task's filters."""
        return self.entry.get("score_filter")

    def hypothesis_test(self, num_samples: int, floor: float = 0.0) -> HypothesisTest:
        """The test for a run that evaluated num_samples samples (n is what was evaluated, not the full set,
        unless the entry pins num_samples)."""
        kwargs = {k: self.entry[k] for k in OVERRIDES if k in self.entry}
        kwargs.setdefault("num_samples", num_samples)
        kwargs.setdefault("floor", floor)
        return HypothesisTest(ref_accuracy=self.accuracy, **kwargs)


def read_yaml(path: Path) -> Any:
    """A references file's content ({} when it does not exist); a folder, an unreadable file, text that is not
    UTF-8 or invalid YAML is a user error naming the file, in one line."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{path}: is a folder, not a references file")
    if not path.exists():
        return {}
    data = read_limited(path, "references file")  # a device or a FIFO: one line, never an endless read
    try:
        return parse_yaml(data.decode("utf-8"), path) or {}
    except UnicodeDecodeError as e:
        raise UserError(f"{path}: not UTF-8 text (byte {e.start})") from None


def parse_yaml(text: str, path: Path) -> Any:
    """yaml.safe_load, with a YAML error as one user-error line: the problem and where (PyYAML's own message spans
    several lines, with the offending text quoted under a caret)."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise UserError(f"{path}: not valid YAML ({yaml_error_line(e)})") from None


def yaml_error_line(e: yaml.YAMLError) -> str:
    mark = getattr(e, "problem_mark", None)
    problem = getattr(e, "problem", None) or getattr(e, "context", None)
    if problem and mark is not None:
        return f"{problem} at line {mark.line + 1}, column {mark.column + 1}"
    return " ".join(str(e).split())


def load_references(task: str, reference_dir: Path = REFERENCE_DIR) -> dict[str, list[dict[str, Any]]]:
    path = reference_dir / f"{task}.yaml"
    data = read_yaml(path)
    if not isinstance(data, dict) or not all(isinstance(v, list) for v in data.values()):
        raise UserError(f"{path}: expected 'model key: [entries]' at the top level")
    for model, entries in data.items():
        for i, entry in enumerate(entries):
            if not isinstance(entry, dict) or not isinstance(entry.get("accuracy"), (int, float)):
                raise UserError(f"{path}: {model} entry {i} needs a numeric 'accuracy'")
    return data


def lookup(task: str, model_key: str, selection: dict[str, Any], reference_dir: Path = REFERENCE_DIR) -> Reference:
    """The first entry of model_key whose selection keys all match; a clear error naming what was asked."""
    entries = load_references(task, reference_dir).get(model_key)
    if entries is None:
        raise UserError(
            f"no {task} reference for model '{model_key}' in {reference_dir / (task + '.yaml')}; "
            "add one, pass --model-key, or run with --no-reference to only report the score"
        )
    for entry in entries:
        if _matches(entry, selection):
            return Reference(task, model_key, float(entry["accuracy"]), entry)
    wanted = ", ".join(f"{k}={v}" for k, v in selection.items())
    raise UserError(f"no {task} reference for '{model_key}' matches {wanted}; run with --no-reference to only report")


def _matches(entry: dict[str, Any], selection: dict[str, Any]) -> bool:
    for key, value in selection.items():
        if key in WILDCARD_KEYS:
            if key in entry and entry[key] != value:
                return False
        elif entry.get(key, SELECTION_DEFAULTS.get(key)) != value:
            return False
    return True
