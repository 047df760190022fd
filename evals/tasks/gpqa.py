"""The GPQA-Diamond task family: its data source, lm-eval YAML, sealed records and live score.

Documents are read in memory (the password-protected zip is never extracted to disk) and given a
per-question seeded choice order.

lm-eval's stock GPQA `process_docs` shuffles with the global `random` module and runs several times per task;
without a warm on-disk cache each run reshuffles and the scored target stops matching the prompt. Here the
order depends only on (seed, Record ID), so it is the same on every call, on every rank and in every run with
the same seed. GPQA text is never written anywhere by this module (the authors ask that it stays off the web).
"""

from __future__ import annotations

import csv
import functools
import hashlib
import io
import os
import random
import re
import zipfile
from pathlib import Path
from typing import Any

import yaml

from ...errors import UserError
from ...user_files import decode_utf8
from .data import DataSource, data_root, hub_or_error
from .data_check import check_csv_text, check_table
from .family import SMOKE_DIR, TaskFamily, TaskSpec, stock_generation_kwargs

HUB = ("Idavidrein/gpqa", "gpqa_diamond")
GPQA_ZIP_MEMBER = "dataset/gpqa_diamond.csv"
GPQA_ZIP_PASSWORD = b"deserted-untie-orchid"  # published in the official GPQA README
LETTERS = "ABCD"
_LETTER = re.compile(r"\(([A-D])\)")
REQUIRED_COLUMNS = ("Question", "Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3")


def clean(text: Any) -> str:
    """lm-eval's GPQA text normalisation (v2.2): strip, ' [title]' -> '. ', double spaces -> single."""
    if text is None:
        return " "
    return str(text).strip().replace(" [title]", ". ").replace("  ", " ")


def choice_order(record_id: str, seed: int) -> list[int]:
    """A permutation of the four answers [incorrect 1, 2, 3, correct], fixed by (seed, record id)."""
    digest = hashlib.sha256(f"{seed}:{record_id}".encode()).digest()
    order = [0, 1, 2, 3]
    random.Random(int.from_bytes(digest[:8], "big")).shuffle(order)
    return order


def strip_only(text: Any) -> str:
    """TensorRT-LLM's `gpqa_diamond_cot_zeroshot_aa` normalisation of the answers: strip, nothing else."""
    return " " if text is None else str(text).strip()


# How a prompt variant tidies the CSV's text: lm-eval's GPQA tasks clean question and answers (`clean`);
# TensorRT-LLM's `_aa` variant strips the answers and leaves the question as the file has it.
TEXT_STYLES = {"lm-eval": (clean, clean), "aa": (strip_only, lambda text: "" if text is None else str(text))}


def make_doc(row: dict[str, Any], index: int, seed: int, style: str = "lm-eval") -> dict[str, Any]:
    tidy, tidy_question = TEXT_STYLES[style]
    answers = [
        tidy(row["Incorrect Answer 1"]),
        tidy(row["Incorrect Answer 2"]),
        tidy(row["Incorrect Answer 3"]),
        tidy(row["Correct Answer"]),
    ]
    record_id = str(row.get("Record ID") or f"row-{index}")
    order = choice_order(record_id, seed)
    choices = [answers[i] for i in order]
    doc = {
        "Question": tidy_question(row["Question"]),
        "Record ID": record_id,
        "choices": choices,
        "answer": f"({LETTERS[order.index(3)]})",
    }
    doc.update({f"choice{i + 1}": c for i, c in enumerate(choices)})
    return doc


def check_gpqa_file(builder: str, path: str) -> int:
    """Rows of a local GPQA file (csv, or the csv inside the official zip) after checking its columns; the zip is
    read in memory, never extracted. Raises UserError naming the file and line."""
    if builder == "csv":
        return check_table(path, "csv", REQUIRED_COLUMNS)
    try:
        stat = os.stat(path)
    except OSError as e:
        raise UserError(f"{path}: cannot read ({e.strerror or e})") from None
    return _check_zip(path, stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=4)
def _check_zip(path: str, size: int, mtime_ns: int) -> int:
    """Once per process and file version: decrypting the zip's csv takes a second in pure Python."""
    where = f"{path}!{GPQA_ZIP_MEMBER}"
    return check_csv_text(decode_utf8(_read_zip(path), where), where, REQUIRED_COLUMNS)


def _read_zip(path: str) -> bytes:
    try:
        with zipfile.ZipFile(path) as z:
            return z.read(GPQA_ZIP_MEMBER, pwd=GPQA_ZIP_PASSWORD)
    except (KeyError, RuntimeError, zipfile.BadZipFile) as e:
        raise UserError(f"{path}: not the official GPQA zip layout ({GPQA_ZIP_MEMBER}): {e}") from None
    except OSError as e:
        raise UserError(f"{path}: cannot read ({e.strerror or e})") from None


def read_rows(builder: str | None, path: str | None, hub: tuple[str, str] | None) -> list[dict[str, Any]]:
    """Raw rows, with every column as a string (numeric-looking answers must stay text)."""
    if builder == "gpqa-zip":
        rows = list(csv.DictReader(io.StringIO(_read_zip(path).decode("utf-8"))))
    elif builder == "csv":
        with open(path, encoding="utf-8", newline="") as f:
            rows = list(csv.DictReader(f))
    elif hub is not None:
        import datasets

        rows = [dict(r) for r in datasets.load_dataset(*hub, split="train")]
    else:
        raise ValueError(f"unknown GPQA source {builder!r}")
    missing = [c for c in REQUIRED_COLUMNS if rows and c not in rows[0]]
    if not rows or missing:
        raise UserError(
            f"GPQA data {path or hub}: {'no rows' if not rows else 'missing columns ' + ', '.join(missing)}"
        )
    return rows


def load_dataset(**kwargs: Any):
    """lm-eval `custom_dataset` hook: kwargs are the task's dataset_kwargs (+ metadata). Returns the docs in
    memory as {"train": Dataset}; nothing reaches the datasets on-disk cache."""
    import datasets

    rows = read_rows(kwargs.get("builder"), kwargs.get("path"), tuple(kwargs["hub"]) if kwargs.get("hub") else None)
    seed, style = int(kwargs.get("shuffle_seed", 0)), str(kwargs.get("text_style", "lm-eval"))
    docs = [make_doc(r, i, seed, style) for i, r in enumerate(rows)]
    return datasets.DatasetDict({"train": datasets.Dataset.from_list(docs)})


def checked_gpqa(src: DataSource) -> DataSource:
    """A local GPQA source whose file (the csv, or the csv inside the official zip) has the expected columns."""
    if src.files:
        src.num_rows["train"] = check_gpqa_file(src.builder or "", src.files["train"])
    return src


def gpqa_source(data_dir: str | None) -> DataSource:
    """gpqa/dataset.zip (the official layout, read in memory) or gpqa/gpqa_diamond.csv under the data folder, else
    the hub."""
    root = data_root(data_dir)
    if root is not None:
        for folder in (root / "gpqa", root):
            if (folder / "dataset.zip").is_file():
                zip_path = str(folder / "dataset.zip")
                return checked_gpqa(DataSource(f"local:{zip_path}", "gpqa-zip", {"train": zip_path}))
            for path in (folder / "gpqa_diamond.csv", folder / "dataset" / "gpqa_diamond.csv"):
                if path.is_file():
                    return checked_gpqa(DataSource(f"local:{path}", "csv", {"train": str(path)}))
    return hub_or_error("GPQA-Diamond", HUB, root, "gpqa/dataset.zip (official layout) or gpqa/gpqa_diamond.csv")


def in_memory_docs_yaml(config: dict[str, Any], source: DataSource, seed: int, style: str) -> str:
    """A GPQA task config as YAML text, its documents supplied in memory by `load_dataset` (seeded choice order,
    the text style of its prompt variant)."""
    config = {
        **config,
        "dataset_path": "specdec-gpqa",  # unused: custom_dataset supplies the docs, in memory
        "dataset_name": None,
        "process_docs": None,  # the stock one reshuffles with the global RNG on every call; ours is seeded
        "dataset_kwargs": {
            "builder": source.builder,
            "path": source.files.get("train"),
            "hub": list(source.hub) if source.hub else None,
            "shuffle_seed": seed,
            "text_style": style,
        },
    }
    # A tag yaml.safe_dump cannot write: lm-eval's loader turns it into the callable (see hook_files).
    return yaml.safe_dump(config, sort_keys=False) + "custom_dataset: !function specdec_hooks.load_dataset\n"


def gpqa_letter(extracted: str) -> str:
    """What a GPQA record may keep of an extraction: the letter. lm-eval's strict-match captures whatever follows
    "The answer is ", which can quote a choice's text, and GPQA text must never be stored."""
    m = re.match(r"\(?([A-D])\)?(?![A-Za-z])", extracted.strip())
    if m:
        return f"({m.group(1)})"
    return extracted if extracted == "[invalid]" else "[other]"


class GpqaDiamond(TaskFamily):
    """lm-eval's `gpqa_diamond_cot_zeroshot` with our per-question seeded choice shuffle (load_dataset above).
    Its records hold no question, choice or output text: only ids, hashes, the extracted letter and correctness;
    the output's token ids are sealed."""

    name = "gpqa_diamond"
    variant = "gpqa_diamond_cot_zeroshot"
    filters = ("strict-match", "flexible-extract")
    max_output_len = 512  # chain of thought needs room to reason
    floor = 25.0  # chance level for four choices
    sealed = True

    def source(self, spec: TaskSpec, data_dir: str | None) -> DataSource:
        if spec.smoke:
            folder = SMOKE_DIR / GpqaDiamond.name  # the other prompt variants ask the same smoke questions
            return checked_gpqa(DataSource(f"smoke:{folder}", "csv", {"train": str(folder / "gpqa_diamond.csv")}))
        return gpqa_source(data_dir)

    def task_yaml(self, spec: TaskSpec, source: DataSource, stock: Path, seed: int) -> str:
        config = {"include": str(self._stock_yaml(stock)), "task": spec.lm_eval_name, "tag": []}
        return in_memory_docs_yaml(config, source, seed, "lm-eval")

    def generation_kwargs(self, stock: Path) -> dict[str, Any]:
        return stock_generation_kwargs(self._stock_yaml(stock))

    @staticmethod
    def _stock_yaml(stock: Path) -> Path:
        return stock / "gpqa" / "cot_zeroshot" / "_gpqa_cot_zeroshot_yaml"

    def hook_files(self) -> dict[str, str]:
        # `!function name.attr` resolves next to the YAML that holds it: a two-line module forwards to ours.
        return {"specdec_hooks.py": f"from {__name__} import load_dataset  # noqa: F401\n"}

    def max_fewshot(self, source: DataSource) -> int | None:
        rows = source.num_rows.get("train")  # shots come from the only split, leaving out the question asked
        return None if rows is None else rows - 1

    def extracted(self, filtered: str) -> str:
        return gpqa_letter(filtered)

    def live_correct(self, output: str, doc: Any) -> bool | None:
        answer = doc.get("answer") if isinstance(doc, dict) else None
        if not isinstance(answer, str) or not re.fullmatch(r"\([A-D]\)", answer):
            return None
        letters = _LETTER.findall(output)  # the last (X) the output names
        return bool(letters) and f"({letters[-1]})" == answer


FAMILY = GpqaDiamond()
TASKS = (
    TaskSpec("gpqa_diamond", FAMILY),
    TaskSpec("gpqa_diamond_smoke", FAMILY, smoke=True),  # self-written GPQA-format questions (offline demos only)
)
