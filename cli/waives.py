"""`specdec-eval waive | unwaive | waives`: edit and check a TensorRT-LLM-format waives.txt.

Only the lines a command adds, rewrites or removes change; every other byte of the file stays as it was. `waive`
and `unwaive` hold the file's lock (a `.<name>.lock` file beside it) from reading to writing, so commands run at
the same time on one file never lose each other's lines.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Literal

import typer

from ..errors import UserError
from ..results.printable import printable
from ..results.waives import MARKERS, WaiveEntry, WaivesFile, check_one_line, edit_waives

WaivesPath = Annotated[Path, typer.Option("--file", "-f", help="The waives file.", dir_okay=False)]
GPU = Annotated[
    str | None, typer.Option("--gpu", help="Only on this GPU or stage (written as 'full:GPU/'); omit for every GPU.")
]


def _read(path: Path) -> WaivesFile:
    try:
        return WaivesFile.read(path)
    except OSError as e:
        raise UserError(str(e)) from None


@contextmanager
def _editing(path: Path, create: bool) -> Iterator[WaivesFile]:
    """The waives file under its lock for one read-modify-write (results.waives.edit_waives); errors in one line."""
    try:
        with edit_waives(path, create=create) as waives:
            yield waives
    except ValueError as e:
        raise UserError(str(e)) from None
    except OSError as e:
        if isinstance(e, (FileNotFoundError, IsADirectoryError)) and e.filename is None:
            raise UserError(str(e)) from None  # our own message, naming the file
        raise UserError(f"cannot edit {path}: {e.strerror or e}") from None


def _where(gpu: str | None) -> str:
    return f" on {gpu}" if gpu else " on every GPU"


# Docstrings become --help, rendered as rich markup: '\\[' keeps a test id's '[...]' from being read as a tag.


def waive(
    test: Annotated[str, typer.Argument(help="The test id, exactly as pytest names it.")],
    bug: Annotated[str, typer.Option("--bug", help="Bug URL or reason, written in parentheses after the marker.")],
    gpu: GPU = None,
    waives_file: WaivesPath = Path("waives.txt"),
    marker: Annotated[
        Literal[MARKERS],  # type: ignore[valid-type]
        typer.Option("--marker", case_sensitive=False, help=f"One of {', '.join(MARKERS)}."),
    ] = "SKIP",
) -> None:
    """Waive a test: add one line 'TEST SKIP (BUG)' to the waives file (created if missing).

    The line goes where it keeps the file sorted; nothing happens if the test is already waived on that GPU.

    Example:  specdec-eval waive "accuracy/test_specdec.py::TestSmolLM2_135M::test_eagle3\\[v2_kv_cache-one_model-tp1]"
    --bug https://nvbugs/123 --gpu H100
    """
    marker = marker.upper()
    if not bug.strip():  # an unset $BUG: a waive must say why, or nobody can tell when to lift it
        raise UserError("--bug is empty: name the bug (a URL or a reason), e.g. --bug https://nvbugs/123")
    if marker not in MARKERS:
        raise UserError(f"unknown marker {marker!r}; expected one of {', '.join(MARKERS)}")
    for value, option in ((test, "TEST"), (bug, "--bug"), (gpu, "--gpu")):
        if value is not None:
            try:
                check_one_line(value, option)
            except ValueError as e:
                raise UserError(str(e)) from None
    with _editing(waives_file, create=True) as waives:
        added = waives.waive(test, bug, gpu=gpu, marker=marker)
        entry = next(e for e in waives.entries if test.strip() in e.test_ids and e.gpu == gpu)
    print(
        f"{'waived' if added else 'already waived'}{_where(gpu)}: {waives_file}:{entry.line_no}: "
        f"{printable(entry.text)}"
    )


def unwaive(
    test: Annotated[str, typer.Argument(help="The test id, exactly as it appears in the waives file.")],
    gpu: GPU = None,
    waives_file: WaivesPath = Path("waives.txt"),
) -> None:
    """Remove the waive of a test: its line, or only its id where a line lists several tests.

    Without --gpu only lines without 'full:' are touched; with --gpu only 'full:GPU/' lines. Exit status 1
    when nothing matched.

    Example: specdec-eval unwaive "accuracy/test_specdec.py::TestSmolLM2_135M::test_eagle3\\[v2_kv_cache-one_model-tp1]"
    --gpu H100
    """
    with _editing(waives_file, create=False) as waives:
        removed = waives.unwaive(test, gpu=gpu)
        others = sorted({e.gpu or "every GPU" for e in waives.entries if test in e.test_ids})
    if not removed:
        hint = f" (it is waived on: {', '.join(others)})" if others else ""
        print(f"specdec-eval: {printable(test)} is not waived{_where(gpu)} in {waives_file}{hint}", file=sys.stderr)
        raise typer.Exit(1)
    for entry in removed:
        kept = " (other test ids on the line kept)" if len(set(entry.test_ids)) > 1 else ""
        print(f"removed {waives_file}:{entry.line_no}: {printable(entry.text)}{kept}")


def _entry_json(entry: WaiveEntry) -> dict:
    return {
        "line": entry.line_no,
        "gpu": entry.gpu,
        "test_ids": entry.test_ids,
        "marker": entry.marker,
        "reason": entry.reason,
        "comment": entry.comment,
    }


def waives_check(
    waives_file: WaivesPath = Path("waives.txt"),
    as_json: Annotated[bool, typer.Option("--json", help="Print entries and problems as JSON.")] = False,
) -> None:
    """Validate the waives file and list its waives, one row per test id. Exit status 1 if there are problems.

    Problems: lines without a marker, unknown markers, text after the marker that is neither '(reason)' nor a
    '# comment', and the same test waived twice for the same GPU.

    Example:  specdec-eval waives -f tests/waives.txt --json
    """
    waives = _read(waives_file)
    problems = waives.validate()
    if as_json:
        report = {"file": str(waives_file), "entries": [_entry_json(e) for e in waives.entries], "problems": problems}
        print(json.dumps(report, indent=2))
    else:
        # What a hand-edited file holds is shown escaped: an escape sequence in it must not drive the terminal.
        rows = [
            tuple(map(printable, (e.line_no, e.gpu or "*", e.marker, t, e.reason or e.comment or "")))
            for e in waives.entries
            for t in e.test_ids
        ]
        header = ("LINE", "GPU", "MARKER", "TEST", "REASON")
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(3)]
        for line, gpu, marker, test, reason in [header, *rows]:
            print(f"{line:<{widths[0]}}  {gpu:<{widths[1]}}  {marker:<{widths[2]}}  {test}  {reason}".rstrip())
        for problem in problems:
            print(f"{waives_file}: {printable(problem)}", file=sys.stderr)
    if problems:
        raise typer.Exit(1)
