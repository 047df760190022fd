"""The GSM8K task family: its data source, lm-eval YAML, records, live score and answer extraction.

Answer extraction and scoring with lm-eval's `gsm8k` semantics (task version 3.0), written out so a
run's per-sample record does not depend on lm-eval's internal sample layout. A test checks these against
lm-eval's own filters and metric on many crafted outputs.

  strict-match:      the number after "#### "                       -> first match of  #### (-?[0-9.,]+)
  flexible-extract:  the last number-looking token in the output    -> last match of   (-?[$0-9.,]{2,})|(-?[0-9]+)
  exact_match:       on both sides remove ",", "$", everything up to "#### ", a trailing "."; lower-case; compare
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from ..conditions.gen_kwargs import GenKwargs
from .data import DataSource, data_root, hub_or_error, split_files
from .data_check import check_table
from .family import TaskFamily, TaskSpec, stock_generation_kwargs

HUB = ("openai/gsm8k", "main")
COLUMNS = ("question", "answer")

INVALID = "[invalid]"
FILTERS = ("strict-match", "flexible-extract")
_STRICT = re.compile(r"#### (\-?[0-9\.\,]+)")
_FLEXIBLE = re.compile(r"(-?[$0-9.,]{2,})|(-?[0-9]+)")
_IGNORE = [re.compile(p) for p in (",", r"\$", r"(?s).*#### ", r"\.$")]


def _pick(matches: list, index: int) -> str:
    if not matches:
        return INVALID
    match = matches[index]
    if isinstance(match, tuple):  # several groups: the first one that matched
        match = next((m for m in match if m), match[0])
    return match.strip()


def extract(output: str, filter_name: str) -> str:
    if filter_name == "strict-match":
        return _pick(_STRICT.findall(output), 0)
    if filter_name == "flexible-extract":
        return _pick(_FLEXIBLE.findall(output), -1)
    raise ValueError(f"unknown GSM8K filter {filter_name!r}; known: {', '.join(FILTERS)}")


def normalise(text: str) -> str:
    for pattern in _IGNORE:
        text = pattern.sub("", text)
    return text.lower()


def is_correct(extracted: str, reference_answer: str) -> bool:
    """reference_answer is the dataset's full worked solution ending in '#### <number>'."""
    return normalise(extracted) == normalise(reference_answer)


def final_answer(reference_answer: str) -> str:
    return normalise(reference_answer)


def checked_gsm8k(src: DataSource) -> DataSource:
    """A local GSM8K source whose files were checked to hold string 'question' and 'answer' in every row."""
    for split, path in src.files.items():
        src.num_rows[split] = check_table(path, src.builder or "", COLUMNS)
    return src


def gsm8k_source(data_dir: str | None) -> DataSource:
    """gsm8k/{train,test}.* or gsm8k/main/{train,test}-*.parquet under the data folder, else the hub."""
    root = data_root(data_dir)
    if root is not None:
        for folder in (root / "gsm8k", root):
            found = split_files(folder, ("train", "test")) or split_files(folder / "main", ("train", "test"))
            if found:
                builder, files = found
                return checked_gsm8k(DataSource(f"local:{folder}", builder, files))
    return hub_or_error("GSM8K", HUB, root, "gsm8k/train.jsonl and gsm8k/test.jsonl")


def load_gsm8k_split(data_dir: str | None, split: str) -> list[dict]:
    """GSM8K rows ({"question", "answer"}) of one split, from wherever gsm8k_source finds them."""
    import datasets

    src = gsm8k_source(data_dir)
    if src.hub is not None:
        rows = datasets.load_dataset(*src.hub, split=split)
    else:
        rows = datasets.load_dataset(src.builder, data_files={split: src.files[split]}, split=split)
    return [{"question": r["question"], "answer": r["answer"]} for r in rows]


class Gsm8k(TaskFamily):
    """lm-eval's `gsm8k` (5-shot from train, strict-match + flexible-extract) on our data source. Its records keep
    the output text and the final number of the target; our filters above are checked against lm-eval's."""

    name = "gsm8k"
    variant = "gsm8k"  # lm-eval's gsm8k, task version 3.0
    filters = FILTERS
    max_output_len = 256  # TensorRT-LLM's GSM8K setting
    num_fewshot = 5
    acceptance_first = True  # the shipped acceptance references were measured on GSM8K

    def source(self, spec: TaskSpec, data_dir: str | None) -> DataSource:
        if spec.smoke:
            files = {s: str(spec.smoke_dir / f"{s}.jsonl") for s in ("train", "test")}
            return checked_gsm8k(DataSource(f"smoke:{spec.smoke_dir}", "json", files))
        return gsm8k_source(data_dir)

    def task_yaml(self, spec: TaskSpec, source: DataSource, stock: Path, seed: int) -> str:
        config: dict[str, Any] = {"include": str(self._stock_yaml(stock)), "task": spec.lm_eval_name, "tag": []}
        if source.hub is not None:
            config.update(dataset_path=source.hub[0], dataset_name=source.hub[1])
        else:
            config.update(dataset_path=source.builder, dataset_name=None, dataset_kwargs={"data_files": source.files})
        return yaml.safe_dump(config, sort_keys=False)

    def generation_kwargs(self, stock: Path) -> dict[str, Any]:
        return stock_generation_kwargs(self._stock_yaml(stock))

    @staticmethod
    def _stock_yaml(stock: Path) -> Path:
        return stock / "gsm8k" / "gsm8k.yaml"

    def target(self, lm_eval_target: str) -> str:
        return final_answer(lm_eval_target)

    def own_extraction(self, output: str, filter_name: str, target: str) -> tuple[str, bool]:
        ours = extract(output, filter_name)
        return ours, is_correct(ours, target)

    def live_correct(self, output: str, doc: Any) -> bool | None:
        answer = doc.get("answer") if isinstance(doc, dict) else None
        return is_correct(extract(output, "flexible-extract"), str(answer)) if answer is not None else None


FAMILY = Gsm8k()
TASKS = (
    TaskSpec("gsm8k", FAMILY),
    # `gsm8k` with the generation kwargs temperature=0.7, under the name the selftest's sampled mutants and earlier
    # runs use (lossless at temperature > 0: a spec-dec run must emit the tokens a plain run of the same seeds samples)
    TaskSpec("gsm8k_sampled", FAMILY, gen_kwargs=GenKwargs.of({"temperature": 0.7})),
    TaskSpec("gsm8k_smoke", FAMILY, smoke=True),  # self-written GSM8K-format problems (offline demos only)
)
