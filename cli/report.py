"""`specdec-eval report`: one self-contained HTML page over finished runs, plus a Markdown summary."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..errors import UserError
from ..records.atomic import atomic_write
from ..results.printable import printable
from ..results.store import DEFAULT_ROOT, Run, open_run, parse_run_id

RUN_FILES = ("summary.json", "samples.parquet", "events.jsonl", "partial", ".lock")  # what only a run folder holds


def report(
    runs: Annotated[
        list[str], typer.Argument(help="Run ids (a unique prefix is enough) or run folders.", show_default=False)
    ],
    root: Annotated[str, typer.Option("--root", help="Runs folder in which run ids are looked up.")] = DEFAULT_ROOT,
    out: Annotated[Path, typer.Option("--out", "-o", help="The HTML file to write.", dir_okay=False)] = Path(
        "report.html"
    ),
    markdown: Annotated[
        Path | None,
        typer.Option("--markdown", help="Also write the Markdown summary to this file.", dir_okay=False),
    ] = None,
) -> None:
    """Report on finished runs: one self-contained HTML page and a Markdown summary.

    The page embeds plots and tables and loads nothing from the network:
    each gate's verdict in words (accuracy, lossless, acceptance length, early stops) and the gate that decided
    each run, scores with 95% intervals against reference and threshold,
    acceptance per draft position, events over time (plots with nothing to show are left out).
    The Markdown summary on stdout fits a pull-request comment.
    No sample text is ever included.

    Examples:

      specdec-eval report 20261202-175916 --out report.html

      specdec-eval report runs/20261202-175916-3731963bb37c

      specdec-eval report BASE CANDIDATE --root /data/runs --markdown pr.md
    """
    for path, option in ((out, "--out"), (markdown, "--markdown")):
        if path is not None:
            _check_not_in_a_run(path, option)
    resolved: list[Run] = []
    for ref in runs:
        try:
            run = open_run(ref, root)
        except (FileNotFoundError, ValueError) as e:  # no such run, several, or one that cannot be read
            raise UserError(str(e)) from None
        if not run.is_finished:
            raise UserError(f"run {run.run_id} is not finished (no summary.json); resume it with the same command")
        resolved.append(run)

    from ..results.report import build_report  # matplotlib: imported only when a report is made

    try:
        html_text, md_text = build_report(resolved)
    except (OSError, ValueError) as e:
        raise UserError(f"cannot read a run: {e}") from None
    _write(out, html_text)
    if markdown is not None:
        _write(markdown, md_text)
    # on the terminal, what runs recorded (test ids, reasons) is shown escaped; the file keeps it as it is
    print("\n".join(printable(line) for line in md_text.split("\n")), end="")
    typer.echo(f"report: {out}" + (f", markdown: {markdown}" if markdown is not None else ""), err=True)


def _check_not_in_a_run(path: Path, option: str) -> None:
    """A report is never written into a run folder: `-o RUN/manifest.json` would replace the run's own record, and
    any other file there would sit among what the run store owns. A run folder holds a manifest.json and is named
    by a run id or holds another file only runs have (a folder of some web project with its manifest.json is not
    one)."""
    target = path.expanduser().resolve()
    for folder in target.parents:
        if (folder / "manifest.json").is_file() and (
            parse_run_id(folder.name)[1] is not None or any((folder / n).exists() for n in RUN_FILES)
        ):
            raise UserError(f"{option} {path}: that is inside run folder {folder}; write the report elsewhere")


def _write(path: Path, text: str) -> None:
    try:
        atomic_write(path, text.encode("utf-8"))  # a reader (a CI artefact upload) never sees half a page
    except OSError as e:
        raise UserError(f"cannot write {path}: {e.strerror or e}") from None
