"""Synthetic GPQA-format rows (INVENTED text about made-up glyphs) and where the real zip is: shared by the GPQA
task tests. The real dataset is only ever read in memory; tests compare counts and hashes, never text."""

from __future__ import annotations

import csv
from pathlib import Path

REAL_ZIP = Path(__file__).resolve().parents[2] / "shared" / "data" / "gpqa" / "dataset.zip"
COLUMNS = [
    "Question",
    "Correct Answer",
    "Incorrect Answer 1",
    "Incorrect Answer 2",
    "Incorrect Answer 3",
    "Explanation",
    "Subdomain",
    "High-level domain",
    "Record ID",
]


def synthetic_row(i: int, record_id: str | None = None) -> dict[str, str]:
    """An invented GPQA-format row: which made-up glyph carries mark number i?"""
    return {
        "Question": f"In the invented Zorbic script, which glyph carries tone mark {i}?",
        "Correct Answer": f"glyph-{i}-true",
        "Incorrect Answer 1": f"glyph-{i}-wrong-a",
        "Incorrect Answer 2": f"glyph-{i}-wrong-b",
        "Incorrect Answer 3": f"glyph-{i}-wrong-c",
        "Explanation": "Made up for this test.",
        "Subdomain": "Invented Linguistics",
        "High-level domain": "Fiction",
        "Record ID": record_id if record_id is not None else f"synthetic-{i:03d}",
    }


ROWS = [synthetic_row(i) for i in range(50)]


def write_csv(path: Path, rows: list[dict[str, str]], columns: list[str] = COLUMNS) -> Path:
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    return path
