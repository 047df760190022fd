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

An entry may also state the conditions it was measured under (task variant, decoding, chat template and its kwargs,
shots, output length); they are checked when the file is read. They do not select
(a run of other conditions still finds the entry, and the accuracy gate then names the differences), except that
among entries that match on the selection keys, the first whose stated conditions the run shares is preferred.
`unknown` as a wildcard key's value means the source does not say: the entry matches any value.
A family's references file is <reference_name>.yaml (a family's `reference_name`: two task variants of one
benchmark, e.g. GPQA-Diamond's two prompts, share one file, each entry naming its variant).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ...errors import UserError
from ...stats.hypothesis import HypothesisTest
from ...user_files import read_limited
from ..conditions.conditions import GenerationConditions
from ..conditions.reference import UNKNOWN, ReferenceConditions, differences

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


def reference_selection(
    *,
    dtype: str = "auto",
    spec_dec_algo: str | None = None,
    kv_cache: str | None = None,
    num_fewshot: int,
    max_output_len: int,
    apply_chat_template: bool = False,
) -> dict[str, Any]:
    """The keys that pick an entry, from what a run declares (no quantisation: our engine has none). The chat
    template is the wildcard key `apply_chat_template` that entries state; TensorRT-LLM's free `extra_acc_spec`
    names no chat template in any shipped entry, so a run sets it to nothing."""
    return {
        "dtype": dtype,
        "quant_algo": None,
        "kv_cache_quant_algo": None,
        "spec_dec_algo": spec_dec_algo,
        "extra_acc_spec": None,
        "kv_cache": kv_cache,
        "num_fewshot": num_fewshot,
        "max_output_len": max_output_len,
        "apply_chat_template": apply_chat_template,
    }


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


def reference_file_stem(task: str) -> str:
    """The references file of a family (its `reference_name`), or `task` itself for a name no family registers."""
    from ..tasks.registry import FAMILIES

    family = FAMILIES.get(task)
    return family.reference_name if family is not None else task


def load_references(task: str, reference_dir: Path = REFERENCE_DIR) -> dict[str, list[dict[str, Any]]]:
    path = reference_dir / f"{reference_file_stem(task)}.yaml"
    data = read_yaml(path)
    if not isinstance(data, dict) or not all(isinstance(v, list) for v in data.values()):
        raise UserError(f"{path}: expected 'model key: [entries]' at the top level")
    for model, entries in data.items():
        for i, entry in enumerate(entries):
            if not isinstance(entry, dict) or not isinstance(entry.get("accuracy"), (int, float)):
                raise UserError(f"{path}: {model} entry {i} needs a numeric 'accuracy'")
            ReferenceConditions.of(entry, f"{path}: {model} entry {i}")  # stated conditions are well-formed
    return data


def lookup(
    task: str,
    model_key: str,
    selection: dict[str, Any],
    reference_dir: Path = REFERENCE_DIR,
    conditions: GenerationConditions | None = None,
) -> Reference:
    """The first entry of model_key whose selection keys all match, preferring the first of those whose stated
    conditions the run's `conditions` share; a clear error naming what was asked."""
    entries = load_references(task, reference_dir).get(model_key)
    if entries is None:
        raise UserError(
            f"no {task} reference for model '{model_key}' in {reference_dir / (reference_file_stem(task) + '.yaml')}; "
            "add one, pass --model-key, or run with --no-reference to only report the score"
        )
    matching = [entry for entry in entries if _matches(entry, selection)]
    if conditions is not None:
        same = [entry for entry in matching if not differences(conditions, ReferenceConditions.of(entry))]
        matching = same + [entry for entry in matching if entry not in same]
    for entry in matching:
        return Reference(task, model_key, float(entry["accuracy"]), entry)
    wanted = ", ".join(f"{k}={v}" for k, v in selection.items())
    raise UserError(f"no {task} reference for '{model_key}' matches {wanted}; run with --no-reference to only report")


def _matches(entry: dict[str, Any], selection: dict[str, Any]) -> bool:
    for key, value in selection.items():
        if key in WILDCARD_KEYS:
            if key in entry and entry[key] not in (value, UNKNOWN):
                return False
        elif entry.get(key, SELECTION_DEFAULTS.get(key)) != value:
            return False
    return True
