"""`specdec-eval sweep`: one command runs `run` over a grid of configurations and judges each cell against the base
cell; `specdec-eval drift RUN`: a trend test of acceptance over one run's documents."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from ..errors import UserError
from ..evals.sweep.grid import MAX_CELLS, Axis, Cell, Grid
from ..evals.sweep.runner import CellRecord, SweepSpec

_OWNED = ("--out", "--json", "--serve-cmd")  # the sweep sets these on every cell


def sweep(
    ctx: typer.Context,
    axis: Annotated[
        list[str],
        typer.Option(
            "--axis",
            help="NAME=V1,V2,...: one axis of the grid (repeatable). NAME is a `run` flag of our engine (batch, "
            "kv-cache, block-reuse, draft-len, tp; on/off for a switch) or a {placeholder} of --serve-cmd; a value "
            "may be LABEL:TEXT (the grid shows LABEL, the command gets TEXT). The first values form the base cell. "
            f"At most {MAX_CELLS} cells in all.",
            show_default=False,
        ),
    ],
    folder: Annotated[
        Path,
        typer.Option(
            "--dir",
            help="The sweep's folder: its plan, one record per cell, the cells' runs (runs/), the grid "
            "(sweep.json, report.html). Run the same command again to resume: finished cells are not rerun (a cell "
            "that broke or could not start is). One sweep at a time per folder.",
            file_okay=False,
        ),
    ],
    serve_cmd: Annotated[
        str | None,
        typer.Option(
            "--serve-cmd",
            help="A server command template (with `run --endpoint URL`): each cell starts it with its axis values "
            'filled in, e.g. "... --max-num-seqs {max_num_seqs} {prefix_caching}".',
        ),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the grid's verdicts as JSON.")] = False,
) -> None:
    """Run `specdec-eval run` (its flags after --) once per cell of a grid, one cell at a time, and judge each cell
    against the base cell on the same documents: greedy outputs token for token (the first divergent document
    named), acceptance paired by document (its change and p-value), and the cell's own accuracy, lossless and
    event verdicts. A cell that cannot start (a combination `run` refuses) or breaks is NOT-RUN, with its reason; a
    base cell whose own run FAILs fails the sweep and nothing is judged against it (UNJUDGED). The cells share one
    lossless baseline (decoded once, for the base cell). Secrets in the commands (keys, tokens) are never recorded.
    Writes DIR/report.html; exit status 1 unless every cell is BASE or PASS.

    Examples:
      specdec-eval sweep --dir sw --axis batch=1,4 --axis kv-cache=v1,v2 -- --spec eagle3 --tasks gsm8k --limit 20
      specdec-eval sweep --dir sw --axis batch=1,4 --axis block-reuse=on,off -- --spec eagle3 --inject BUG ...
      specdec-eval sweep --dir sv --axis max_num_seqs=1,4 --serve-cmd "SERVER --max-num-seqs {max_num_seqs}" -- \
--endpoint URL --spec eagle3 --baseline-endpoint URL0 --tasks gsm8k
    """
    from ..evals.sweep.judge import judge
    from ..evals.sweep.runner import check_folder, run_sweep
    from ..records import atomic_write, write_json
    from ..results.report.sweep_page import render_sweep_html, sweep_verdict

    run_args = list(ctx.args)
    owned = [a for a in run_args if a.split("=")[0] in _OWNED]
    if owned:
        raise UserError(f"{owned[0]} after --: the sweep sets it for every cell (use --dir, --json, --serve-cmd)")
    grid = Grid(tuple(Axis.parse(a) for a in axis), serve_cmd)
    flags = {a.split("=")[0] for a in run_args}
    for a in grid.axes:
        if f"--{a.name.replace('_', '-')}" in flags and a.key not in grid.placeholders:
            raise UserError(f"--axis {a.name} and {a.name} after -- both set it; give it once")
    with check_folder(folder, SweepSpec(list(axis), serve_cmd, run_args)):
        records = run_sweep(folder, grid, run_args, _progress, speculative=_speculative(run_args), on_note=_note)
        verdicts = judge(records)
        result = {"axes": [a.name for a in grid.axes], "cells": [v.to_json() for v in verdicts]}
        write_json(folder / "grid.json", result)
        atomic_write(folder / "report.html", render_sweep_html(result).encode("utf-8"))
    verdict, why = sweep_verdict(result["cells"])
    if json_out:
        print(json.dumps(result, indent=2))
    else:
        _print_grid(result)
        print(f"sweep {verdict}: {why}")
        print(f"report: {folder / 'report.html'}")
    if verdict != "PASS":
        raise typer.Exit(1)


def _speculative(run_args: list[str]) -> bool:
    for i, a in enumerate(run_args):
        if a == "--spec" and i + 1 < len(run_args):
            return run_args[i + 1] != "none"
        if a.startswith("--spec="):
            return a.split("=", 1)[1] != "none"
    return False


def _progress(i: int, n: int, cell: Cell, record: CellRecord | None, resumed: bool) -> None:
    if record is None:
        print(f"[{i + 1}/{n}] {cell.name}: running", file=sys.stderr, flush=True)
        return
    how = "recorded earlier, not rerun" if resumed else f"{record.wall_s:.1f} s"
    tail = f": {record.error}" if record.error and record.status != "finished" else ""
    print(f"[{i + 1}/{n}] {cell.name}: {record.status} ({how}){tail}", file=sys.stderr, flush=True)


def _note(i: int, n: int, cell: Cell, why: str) -> None:
    print(f"[{i + 1}/{n}] {cell.name}: {why}", file=sys.stderr, flush=True)


def _print_grid(result: dict) -> None:
    axes = result["axes"]
    head = [*axes, "verdict", "AL", "AL vs base", "p(drop)", "outputs", "run", "why"]
    rows = []
    for c in result["cells"]:
        same = "" if c["outputs_compared"] is None else f"{c['outputs_identical']}/{c['outputs_compared']} same"
        rows.append(
            [
                *(c["labels"].get(a, "") for a in axes),
                c["verdict"],
                "" if c["acceptance_length"] is None else f"{c['acceptance_length']:.3f}",
                "" if c["acceptance_change"] is None else f"{c['acceptance_change']:+.1%}",
                "" if c["acceptance_p"] is None else f"{c['acceptance_p']:.3g}",
                same,
                c["run_verdict"] or c["status"],
                "; ".join(c["reasons"]) if c["verdict"] != "BASE" else "",
            ]
        )
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    for r in [head, *rows]:
        print("  ".join(str(x).ljust(w) for x, w in zip(r, widths, strict=True)).rstrip())


def drift(
    run: Annotated[str, typer.Argument(help="A recorded spec-dec run (its id in --out, or its folder).")],
    out: Annotated[Path | None, typer.Option("--out", help="The runs folder holding RUN.", file_okay=False)] = None,
    alpha: Annotated[float, typer.Option("--alpha", help="Level of the one-sided trend test.")] = 0.05,
    json_out: Annotated[bool, typer.Option("--json", help="Print the test as JSON.")] = False,
) -> None:
    """Does acceptance fall as the run goes on? Per task, each document's acceptance length against the order in
    which its request was sent: Kendall's tau with a one-sided p-value for a decay (each task at alpha / tasks
    tested), and the slope. A task with too few drafted documents says so. Exit status 1 on DECAY in any task.

    Example:
      specdec-eval drift 20261207-101500-ab12cd --out runs
    """
    from ..evals.sweep.drift import DECAY, drift_per_task, drift_test, render_drift, task_lengths_in_time
    from ..results.store import DEFAULT_ROOT, open_run

    try:
        recorded = open_run(run, str(out or DEFAULT_ROOT))
    except (FileNotFoundError, ValueError) as e:
        raise UserError(str(e)) from None
    if not recorded.is_finished:
        raise UserError(f"run {recorded.run_id} is not finished")
    series = task_lengths_in_time(recorded.samples(), f"run {recorded.run_id}")
    results = drift_per_task(series, alpha) if series else {"(no task drafted)": drift_test([], alpha)}
    if json_out:
        print(json.dumps({"run": recorded.run_id, "tasks": {t: d.to_json() for t, d in results.items()}}, indent=2))
    else:
        for task, d in results.items():
            print(render_drift(d, f"{recorded.run_id} {task}"))
    if any(d.verdict == DECAY for d in results.values()):
        raise typer.Exit(1)
