"""Where a task's data comes from: a local folder first, then the Hugging Face cache or hub. Each family's module
says which files and which hub dataset are its own (`gsm8k`, `gpqa`); the order and the helpers are here.

Order: `--data-dir`, else the SPECDEC_EVAL_DATA environment variable, else the family's hub dataset (which also
covers a warm Hugging Face cache). If none has the data, one error names both ways.

Local layouts accepted under the data folder:
  gsm8k/{train,test}.{jsonl,json,parquet,csv}      (the openai/grade-school-math files, or the HF parquet export)
  gsm8k/main/{train,test}-*.parquet                (a snapshot of the openai/gsm8k hub repository)
  gpqa/dataset.zip                                  (the official password-protected release layout)
  gpqa/gpqa_diamond.csv, gpqa/dataset/gpqa_diamond.csv

Local files are schema-checked when their source is resolved (`data_check`), so a wrong column, broken
JSON or an empty file is one error naming the file and line before any run folder is created.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import UserError

DATA_ENV = "SPECDEC_EVAL_DATA"
_TABLE_FORMATS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}


@dataclass
class DataSource:
    """Either local files (`builder` + `files`) or a hub dataset (`hub`)."""

    origin: str  # human-readable, for the run manifest
    builder: str | None = None  # datasets builder for local files: json | parquet | csv | gpqa-zip
    files: dict[str, str] = field(default_factory=dict)  # split -> path
    hub: tuple[str, str] | None = None
    num_rows: dict[str, int] = field(default_factory=dict)  # split -> rows, for checked local files


def data_root(data_dir: str | None) -> Path | None:
    raw = data_dir or os.environ.get(DATA_ENV)
    if not raw:
        return None
    root = Path(raw).expanduser()
    if not root.is_dir():
        where = "--data-dir" if data_dir else DATA_ENV
        raise UserError(f"{where} {raw} is not a folder")
    return root.resolve()


def split_files(folder: Path, splits: tuple[str, ...]) -> tuple[str, dict[str, str]] | None:
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


def hub_or_error(name: str, hub: tuple[str, str], root: Path | None, layout: str) -> DataSource:
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
