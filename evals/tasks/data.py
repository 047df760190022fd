"""Where each task's data comes from: a local folder first, then the Hugging Face cache or hub.

Order: `--data-dir`, else the SPECDEC_EVAL_DATA environment variable, else the hub datasets (`openai/gsm8k`,
`Idavidrein/gpqa`, which also covers a warm Hugging Face cache). If none has the data, one error names both ways.

Local layouts accepted under the data folder:
  gsm8k/{train,test}.{jsonl,json,parquet,csv}      (the openai/grade-school-math files, or the HF parquet export)
  gsm8k/main/{train,test}-*.parquet                (a snapshot of the openai/gsm8k hub repository)
  gpqa/dataset.zip                                  (the official password-protected release layout)
  gpqa/gpqa_diamond.csv, gpqa/dataset/gpqa_diamond.csv

Local files are schema-checked when their source is resolved (evals/tasks/data_check.py), so a wrong column, broken
JSON or an empty file is one error naming the file and line before any run folder is created.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from ...workers.errors import UserError
from .data_check import check_table

DATA_ENV = "SPECDEC_EVAL_DATA"
GSM8K_HUB = ("openai/gsm8k", "main")
GPQA_HUB = ("Idavidrein/gpqa", "gpqa_diamond")
GPQA_ZIP_MEMBER = "dataset/gpqa_diamond.csv"
GPQA_ZIP_PASSWORD = b"deserted-untie-orchid"  # published in the official GPQA README
_TABLE_FORMATS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}
GSM8K_COLUMNS = ("question", "answer")


@dataclass
class DataSource:
    """Either local files (`builder` + `files`) or a hub dataset (`hub`)."""

    origin: str  # human-readable, for the run manifest
    builder: str | None = None  # datasets builder for local files: json | parquet | csv | gpqa-zip
    files: dict[str, str] = field(default_factory=dict)  # split -> path
    hub: tuple[str, str] | None = None
    num_rows: dict[str, int] = field(default_factory=dict)  # split -> rows, for checked local files


def checked_gsm8k(src: DataSource) -> DataSource:
    """A local GSM8K source whose files were checked to hold string 'question' and 'answer' in every row."""
    for split, path in src.files.items():
        src.num_rows[split] = check_table(path, src.builder or "", GSM8K_COLUMNS)
    return src


def checked_gpqa(src: DataSource) -> DataSource:
    """A local GPQA source whose file (the csv, or the csv inside the official zip) has the expected columns."""
    from .gpqa import check_gpqa_file  # late: gpqa.py imports this module

    if src.files:
        src.num_rows["train"] = check_gpqa_file(src.builder or "", src.files["train"])
    return src


def data_root(data_dir: str | None) -> Path | None:
    raw = data_dir or os.environ.get(DATA_ENV)
    if not raw:
        return None
    root = Path(raw).expanduser()
    if not root.is_dir():
        where = "--data-dir" if data_dir else DATA_ENV
        raise UserError(f"{where} {raw} is not a folder")
    return root.resolve()


def gsm8k_source(data_dir: str | None) -> DataSource:
    root = data_root(data_dir)
    if root is not None:
        for folder in (root / "gsm8k", root):
            found = _split_files(folder, ("train", "test")) or _split_files(folder / "main", ("train", "test"))
            if found:
                builder, files = found
                return checked_gsm8k(DataSource(f"local:{folder}", builder, files))
    return _hub_or_error("GSM8K", GSM8K_HUB, root, "gsm8k/train.jsonl and gsm8k/test.jsonl")


def gpqa_source(data_dir: str | None) -> DataSource:
    root = data_root(data_dir)
    if root is not None:
        for folder in (root / "gpqa", root):
            if (folder / "dataset.zip").is_file():
                zip_path = str(folder / "dataset.zip")
                return checked_gpqa(DataSource(f"local:{zip_path}", "gpqa-zip", {"train": zip_path}))
            for csv in (folder / "gpqa_diamond.csv", folder / "dataset" / "gpqa_diamond.csv"):
                if csv.is_file():
                    return checked_gpqa(DataSource(f"local:{csv}", "csv", {"train": str(csv)}))
    return _hub_or_error("GPQA-Diamond", GPQA_HUB, root, "gpqa/dataset.zip (official layout) or gpqa/gpqa_diamond.csv")


def _split_files(folder: Path, splits: tuple[str, ...]) -> tuple[str, dict[str, str]] | None:
    """{split: file} when every split has exactly one file of one table format in folder."""
    if not folder.is_dir():
        return None
    for suffix, builder in _TABLE_FORMATS.items():
        files = {}
        for split in splits:
            matches = sorted(folder.glob(f"{split}{suffix}")) or sorted(folder.glob(f"{split}-*{suffix}"))
            if len(matches) != 1:
                break
            files[split] = str(matches[0])
        else:
            return builder, files
    return None


def _hub_or_error(name: str, hub: tuple[str, str], root: Path | None, layout: str) -> DataSource:
    """The hub dataset, if the Hugging Face cache or hub can serve it; otherwise one error naming both ways."""
    import datasets

    try:
        datasets.load_dataset_builder(*hub)
    except Exception as e:  # offline mode, no network, gated repository, missing cache: all the same to the user
        looked = f"{root} has no {layout}" if root else f"no --data-dir or {DATA_ENV} given"
        reason = str(e).splitlines()[0][:160] if str(e) else type(e).__name__
        raise UserError(
            f"{name} data not found: {looked}, and the Hugging Face cache/hub has no {hub[0]} ({reason}). "
            f"Pass --data-dir DIR holding {layout}, or make {hub[0]} available to `datasets`."
        ) from None
    return DataSource(f"hub:{hub[0]}/{hub[1]}", hub=hub)


def load_gsm8k_split(data_dir: str | None, split: str) -> list[dict]:
    """GSM8K rows ({"question", "answer"}) of one split, from wherever gsm8k_source finds them."""
    import datasets

    src = gsm8k_source(data_dir)
    if src.hub is not None:
        rows = datasets.load_dataset(*src.hub, split=split)
    else:
        rows = datasets.load_dataset(src.builder, data_files={split: src.files[split]}, split=split)
    return [{"question": r["question"], "answer": r["answer"]} for r in rows]
