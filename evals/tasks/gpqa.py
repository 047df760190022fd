"""GPQA-Diamond documents: read in memory (the password-protected zip is never extracted to disk) and given a
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
import zipfile
from typing import Any

from ...workers.errors import UserError
from .data import GPQA_ZIP_MEMBER, GPQA_ZIP_PASSWORD
from .data_check import check_csv_text, check_table, decode_utf8

LETTERS = "ABCD"
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


def make_doc(row: dict[str, Any], index: int, seed: int) -> dict[str, Any]:
    answers = [clean(row["Incorrect Answer 1"]), clean(row["Incorrect Answer 2"]), clean(row["Incorrect Answer 3"]),
               clean(row["Correct Answer"])]  # fmt: skip
    record_id = str(row.get("Record ID") or f"row-{index}")
    order = choice_order(record_id, seed)
    choices = [answers[i] for i in order]
    doc = {"Question": clean(row["Question"]), "Record ID": record_id, "choices": choices,
           "answer": f"({LETTERS[order.index(3)]})"}  # fmt: skip
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
    seed = int(kwargs.get("shuffle_seed", 0))
    docs = [make_doc(r, i, seed) for i, r in enumerate(rows)]
    return datasets.DatasetDict({"train": datasets.Dataset.from_list(docs)})
