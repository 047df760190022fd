"""Schema checks of local data files, run when a task's data source is resolved (before any run folder exists).

lm-eval reads the files much later, inside its task loader, where a wrong column surfaces as a jinja2
UndefinedError and broken JSON as a pyarrow traceback. Here every problem is one `UserError` that names the
file, the line (and column where there is one) and what was expected. A check returns the number of rows, which
also bounds `--num-fewshot`.

Accepted, as the `datasets` builders read them: JSON lines or one JSON array of objects (json), a CSV with a
header row (csv), a parquet table (parquet).
"""

from __future__ import annotations

import csv
import functools
import io
import json
from pathlib import Path

from ...errors import UserError
from ...user_files import DATA_LIMIT, decode_utf8, kind_of, read_limited


def check_table(path: str | Path, builder: str, columns: tuple[str, ...]) -> int:
    """Rows in a local data file after checking it has `columns` (as strings) in every row; raises UserError."""
    p = Path(path)
    try:
        stat = p.stat()
    except OSError as e:
        raise UserError(f"{p}: cannot read the data file ({e.strerror or e})") from None
    kind = kind_of(stat.st_mode)
    if kind is not None:
        raise UserError(f"{p}: expected a data file, found {kind}")
    return _check_cached(str(p), stat.st_size, stat.st_mtime_ns, builder, columns)


@functools.lru_cache(maxsize=32)
def _check_cached(path: str, size: int, mtime_ns: int, builder: str, columns: tuple[str, ...]) -> int:
    """Keyed by size and mtime: the same file is checked once per process (the CLI and the pipeline both ask)."""
    if builder == "parquet":
        return _check_parquet(path, columns)
    text = decode_utf8(read_limited(path, "data file", DATA_LIMIT), path)
    if builder == "json":
        return check_json_text(text, path, columns)
    if builder == "csv":
        return check_csv_text(text, path, columns)
    raise ValueError(f"no schema check for builder {builder!r}")


def _expected(columns: tuple[str, ...]) -> str:
    return " and ".join(repr(c) for c in columns)


def check_json_text(text: str, where: str, columns: tuple[str, ...]) -> int:
    """JSON lines, or one JSON array, of objects with string `columns`."""
    if text.lstrip().startswith("["):
        try:
            rows = json.loads(text)
        except json.JSONDecodeError as e:
            raise UserError(f"{where}:{e.lineno}:{e.colno}: not valid JSON ({e.msg})") from None
        if not isinstance(rows, list):
            raise UserError(f"{where}: expected a JSON array of objects with {_expected(columns)}")
        for index, row in enumerate(rows):
            _check_row(row, f"{where}: item {index}", columns)
        numbered = len(rows)
    else:
        numbered = 0
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise UserError(f"{where}:{number}:{e.colno}: not valid JSON ({e.msg})") from None
            _check_row(row, f"{where}:{number}", columns)
            numbered += 1
    if not numbered:
        raise UserError(f"{where}: no rows (expected JSON lines, each an object with {_expected(columns)})")
    return numbered


def _check_row(row: object, where: str, columns: tuple[str, ...]) -> None:
    if not isinstance(row, dict):
        raise UserError(f"{where}: expected a JSON object with {_expected(columns)}, got {type(row).__name__}")
    missing = [c for c in columns if c not in row]
    if missing:
        keys = ", ".join(repr(k) for k in list(row)[:8]) or "none"
        raise UserError(f"{where}: missing {_expected(tuple(missing))} (expected {_expected(columns)}; has {keys})")
    for c in columns:
        if not isinstance(row[c], str):
            raise UserError(f"{where}: {c!r} must be a string, got {type(row[c]).__name__}")


def check_csv_text(text: str, where: str, columns: tuple[str, ...]) -> int:
    """A header row naming every one of `columns`, then rows with a value in each of them."""
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        header = reader.fieldnames or []
        missing = [c for c in columns if c not in header]
        if missing:
            has = ", ".join(repr(h) for h in header[:8]) or "nothing"
            raise UserError(f"{where}:1: missing columns {', '.join(map(repr, missing))} in the header (has {has})")
        rows = 0
        for row in reader:
            empty = [c for c in columns if row.get(c) is None or not row[c].strip()]
            if empty:
                raise UserError(f"{where}:{reader.line_num}: no value in column {empty[0]!r}")
            rows += 1
    except csv.Error as e:
        raise UserError(f"{where}:{reader.line_num}: not valid CSV ({e})") from None
    if not rows:
        raise UserError(f"{where}: no rows after the header")
    return rows


def _check_parquet(path: str, columns: tuple[str, ...]) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        meta = pq.ParquetFile(path)
    except (OSError, pa.ArrowException) as e:
        raise UserError(f"{path}: not a readable parquet file ({str(e).splitlines()[0][:120]})") from None
    schema = meta.schema_arrow
    missing = [c for c in columns if c not in schema.names]
    if missing:
        has = ", ".join(repr(n) for n in schema.names[:8]) or "nothing"
        raise UserError(f"{path}: missing columns {', '.join(map(repr, missing))} (has {has})")
    for c in columns:
        kind = schema.field(c).type
        if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
            raise UserError(f"{path}: column {c!r} must hold strings, has {kind}")
    if meta.metadata.num_rows == 0:
        raise UserError(f"{path}: no rows")
    return meta.metadata.num_rows
