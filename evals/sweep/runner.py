"""Running a sweep's cells one at a time, each a `specdec-eval run` of its own process (a cell that crashes or
cannot start ends only itself), recorded in the sweep's folder so that a sweep started again skips every cell
already finished:

  DIR/sweep.json        what was asked (axes, template, the run's flags): a resumed sweep must ask the same
  DIR/runs/             the runs folder of every cell (`run --out`)
  DIR/cells/CELL.json   one record per cell: its status, its run's folder, its command, its wall time

The cells share one lossless baseline: the base cell runs first with `--baseline separate` (a plain run of its
configuration, decoded once), and every other cell names that run as its `--baseline`. Not when the sweep's own
flags choose a baseline or a server (`run` finds a baseline server's run again in the shared runs folder), nor when
that run cannot be named (one carrying an `--inject`ed bug is refused by the gate): each cell then keeps `run`'s
own policy. Other shared runs (the noise-floor control) are found in the shared runs folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ...errors import UserError
from ...results.atomic import atomic_write
from ...workers.remote.server.process import ALREADY_ANSWERS
from .grid import Cell, Grid

DONE, FAILED, NOT_STARTED = "finished", "run failed", "could not start"
USAGE_EXIT = 2  # `run`'s status for input it refuses before anything starts
# A cell whose server's URL still answers (the previous cell's server has not yet let go of its port) is started
# again every PORT_POLL_S until PORT_WAIT_S have passed; then it is recorded as failed, so a resumed sweep retries it.
PORT_WAIT_S = 120.0
PORT_POLL_S = 5.0
PORT_BUSY = "could not start: port busy"


@dataclass(frozen=True)
class CellRecord:
    cell: str
    labels: dict[str, str]
    status: str  # DONE (a verdict, PASS or FAIL), FAILED (it started, then broke), NOT_STARTED
    exit_code: int
    run_dir: str | None = None
    error: str = ""  # the run's last error line
    wall_s: float = 0.0
    command: list[str] = field(default_factory=list)

    @property
    def finished(self) -> bool:
        return self.status != FAILED  # a failed run is tried again on resume; the other two are final


@dataclass(frozen=True)
class SweepSpec:
    """What a sweep asks; its folder keeps it so that a resume cannot quietly mix two sweeps."""

    axes: list[str]  # as given: NAME=V1,V2
    serve_cmd: str | None
    run_args: list[str]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def check_folder(folder: Path, spec: SweepSpec) -> None:
    """Record the sweep in `folder`, or check that the sweep recorded there is this one."""
    path = folder / "sweep.json"
    if path.is_file():
        recorded = json.loads(path.read_text(encoding="utf-8"))
        if recorded != spec.to_json():
            raise UserError(
                f"{folder} holds another sweep (other axes, template or run flags); give a new --dir, or the same "
                "flags to resume it"
            )
        return
    if folder.exists() and any(folder.iterdir()):
        raise UserError(f"--dir {folder} is not empty and holds no sweep")
    atomic_write(path, json.dumps(spec.to_json(), indent=2).encode())


def load_record(folder: Path, cell: Cell) -> CellRecord | None:
    path = folder / "cells" / f"{cell.slug}.json"
    if not path.is_file():
        return None
    return CellRecord(**json.loads(path.read_text(encoding="utf-8")))


def _save(folder: Path, cell: Cell, record: CellRecord) -> None:
    atomic_write(folder / "cells" / f"{cell.slug}.json", json.dumps(asdict(record), indent=2).encode())


def run_command(run_args: list[str], out: Path) -> list[str]:
    return [sys.executable, "-m", "specdec_eval.cli.main", "run", *run_args, "--out", str(out), "--json"]


def run_cell(folder: Path, grid: Grid, cell: Cell, run_args: list[str], extra: list[str]) -> CellRecord:
    """Run one cell to its end and record it."""
    cmd = run_command([*run_args, *grid.run_args(cell), *extra], folder / "runs")
    env = {**os.environ, "PYTHONSAFEPATH": "1"}  # never import a checkout in the working folder over the install
    start = time.monotonic()
    while True:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        busy = proc.returncode == USAGE_EXIT and ALREADY_ANSWERS in proc.stderr
        if not busy or time.monotonic() - start + PORT_POLL_S > PORT_WAIT_S:
            break
        time.sleep(PORT_POLL_S)  # the previous cell's server may still be letting go of the port
    wall = round(time.monotonic() - start, 2)
    run_dir = None
    try:
        run_dir = json.loads(proc.stdout[proc.stdout.index("{") :]).get("run_dir")
    except ValueError:
        pass
    lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
    error = lines[-1] if lines and proc.returncode != 0 else ""
    if run_dir is not None:
        status = DONE
    elif busy:  # not the cell's own fault: retried when the sweep is resumed
        status, error = FAILED, f"{PORT_BUSY} after {wall:.0f} s: {error}"
    elif proc.returncode == USAGE_EXIT:
        status = NOT_STARTED
    else:
        status = FAILED
    record = CellRecord(cell.name, cell.labels(), status, proc.returncode, run_dir, error, wall, cmd)
    _save(folder, cell, record)
    return record


def shared_baseline(record: CellRecord) -> str | None:
    """The plain run the base cell's lossless gate compared with, when the other cells may name it (a clean run)."""
    if record.run_dir is None:
        return None
    summary = json.loads((Path(record.run_dir) / "summary.json").read_text(encoding="utf-8"))
    for task in (summary.get("tasks") or {}).values():
        base = (task.get("lossless") or {}).get("baseline_run")
        if base:
            path = Path(record.run_dir).parent / base
            manifest = json.loads((path / "manifest.json").read_text(encoding="utf-8"))
            engine = (manifest.get("config") or {}).get("engine") or {}
            return None if engine.get("inject") else str(path)
    return None


def run_sweep(
    folder: Path,
    grid: Grid,
    run_args: list[str],
    on_cell: Callable[[int, int, Cell, CellRecord | None, bool], None] | None = None,
    speculative: bool = True,
) -> list[CellRecord]:
    """Every cell, base first, one at a time; a cell recorded as finished (or as unable to start) is not run
    again. on_cell(i, n, cell, record, resumed) is called before (record None) and after each cell."""
    cells = grid.cells()
    given = {a.split("=")[0] for a in run_args}
    # A server's cells keep `run`'s own policy (a baseline server's run, found again in the shared runs folder).
    choose_baseline = speculative and not given & {"--baseline", "--endpoint", "--baseline-endpoint"}
    records: list[CellRecord] = []
    baseline: str | None = None
    for i, cell in enumerate(cells):
        record = load_record(folder, cell)
        resumed = record is not None and record.finished
        if not resumed:
            if on_cell is not None:
                on_cell(i, len(cells), cell, None, False)
            extra: list[str] = []
            if choose_baseline and (i == 0 or baseline):
                extra = ["--baseline", baseline or "separate"]
            record = run_cell(folder, grid, cell, run_args, extra)
        if i == 0 and choose_baseline:
            baseline = shared_baseline(record)
        if on_cell is not None:
            on_cell(i, len(cells), cell, record, resumed)
        records.append(record)
    return records
