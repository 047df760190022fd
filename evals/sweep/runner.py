"""Running a sweep's cells one at a time, each a `specdec-eval run` of its own process (a cell that crashes or
cannot start ends only itself), recorded in the sweep's folder so that a sweep started again skips every cell
already finished:

  DIR/sweep.json        what was asked (axes, template, the run's flags): a resumed sweep must ask the same
  DIR/runs/             the runs folder of every cell (`run --out`)
  DIR/cells/CELL.json   one record per cell: its status, its run's folder, its command, its wall time
  DIR/.sweep.lock       held by the sweep running in DIR: a second one is refused

Both records hold commands: they go through the record layer, which scrubs every secret (a key in `--serve-cmd`,
`HF_TOKEN=...` before it, `--api-key=...` among the run's flags) before they reach disk and makes them owner-only;
a resume compares the scrubbed forms. Only a finished cell is final: a cell that broke or could not start is run
again on resume (its reason may have passed: a busy port, a run lock held by another process), and so is a cell
whose record is damaged, belongs to another cell, or names a run folder that is gone.

The cells share one lossless baseline: the base cell runs first with `--baseline separate` (a plain run of its
configuration, decoded once), and every other cell names that run as its `--baseline`. Not when the sweep's own
flags choose a baseline or a server (`run` finds a baseline server's run again in the shared runs folder), nor when
that run cannot be named (one carrying an `--inject`ed bug is refused by the gate): each cell then keeps `run`'s
own policy. Other shared runs (the noise-floor control) are found in the shared runs folder."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from ...errors import UserError
from ...gates.lossless import GATE as LOSSLESS
from ...peers.server.process import ALREADY_ANSWERS
from ...records import RecordError, file_name, locks, read_json, scrub, write_json
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
        """Final on resume: only a cell that ran to a verdict (the reason a cell broke or could not start may have
        passed: a busy port, a run lock another process held)."""
        return self.status == DONE

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> CellRecord:
        """A record as `_save` wrote it; ValueError for any other shape (a key missing or unknown, a wrong type)."""
        names = {f.name for f in fields(cls)}
        if set(obj) - names or not {"cell", "labels", "status", "exit_code"} <= set(obj):
            raise ValueError("not a cell record of this version (its keys differ)")
        record = cls(**obj)
        if not (
            isinstance(record.cell, str)
            and isinstance(record.labels, dict)
            and record.status in (DONE, FAILED, NOT_STARTED)
            and isinstance(record.exit_code, int)
            and (record.run_dir is None or isinstance(record.run_dir, str))
        ):
            raise ValueError("not a cell record of this version (a value of the wrong kind)")
        return record


@dataclass(frozen=True)
class SweepSpec:
    """What a sweep asks; its folder keeps it so that a resume cannot quietly mix two sweeps."""

    axes: list[str]  # as given: NAME=V1,V2
    serve_cmd: str | None
    run_args: list[str]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


LOCK_NAME = ".sweep.lock"


def check_folder(folder: Path, spec: SweepSpec) -> locks.FileLock:
    """Take the folder's sweep lock, and record the sweep in `folder` or check that the sweep recorded there is
    this one (compared as recorded: scrubbed). Returns the lock, held for the whole sweep."""
    path = folder / "sweep.json"
    if folder.exists() and not path.is_file() and any(p.name != LOCK_NAME for p in folder.iterdir()):
        raise UserError(f"--dir {folder} is not empty and holds no sweep")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        held = locks.try_lock(folder / LOCK_NAME)
    except OSError as e:
        raise UserError(f"--dir {folder}: cannot be written ({e.strerror or e})") from None
    if held is None:
        pid = locks.holder_pid(folder / LOCK_NAME)
        raise UserError(f"another sweep is running in {folder}{f' (pid {pid})' if pid else ''}; wait for it to end")
    try:
        asked = scrub(spec.to_json())
        if path.exists():
            try:
                recorded = read_json(path)
            except RecordError as e:
                raise UserError(f"{e}; it is not a sweep this version can resume: give a new --dir") from None
            if scrub(recorded) != asked:
                raise UserError(
                    f"{folder} holds another sweep (other axes, template or run flags); give a new --dir, or the "
                    "same flags to resume it"
                )
            if recorded == asked:
                return held
        write_json(path, asked, holds_commands=True)  # new, or one recorded with its secrets in clear
    except BaseException:
        held.release()
        raise
    return held


def cell_path(folder: Path, cell: Cell) -> Path:
    """The cell's record: its name when every label is plain text, else a name with a hash of its labels."""
    plain = all(v.label.replace("_", "a").replace(".", "a").isalnum() for _, v in cell.values)
    identity = None if plain else json.dumps(list(cell.labels().items()))
    return folder / "cells" / file_name(cell.slug, identity, ".json")


def load_record(folder: Path, cell: Cell) -> tuple[CellRecord | None, str | None]:
    """The cell's record when it may be trusted, else None and why it is run again (None: never recorded)."""
    path = cell_path(folder, cell)
    if not path.exists():
        return None, None
    try:
        recorded = read_json(path)
        record = CellRecord.from_json(recorded)
    except (RecordError, ValueError, TypeError) as e:
        return None, f"its record cannot be read ({str(e).removeprefix(f'{path}: ')}): run again"
    if record.cell != cell.name or record.labels != cell.labels():
        return None, f"its record is another cell's ({record.cell}): run again"
    if record.status == DONE and not (record.run_dir and (Path(record.run_dir) / "summary.json").is_file()):
        return None, "its run's folder is gone: run again"
    if scrub(recorded) != recorded:  # recorded before secrets were scrubbed: scrub it now
        write_json(path, recorded, holds_commands=True)
        record = CellRecord.from_json(scrub(recorded))
    return record, None


def _save(folder: Path, cell: Cell, record: CellRecord) -> None:
    write_json(cell_path(folder, cell), asdict(record), holds_commands=True)


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
    if proc.returncode < 0:  # ended by a signal: say which (a SIGKILL leaves no line of its own)
        error = f"killed by {_signal_name(-proc.returncode)}" + (f" ({error})" if error else "")
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
    return CellRecord(**scrub(asdict(record)))  # as recorded: no secret travels on into the grid or the report


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def shared_baseline(record: CellRecord) -> str | None:
    """The plain run the base cell's lossless gate compared with, when the other cells may name it (a clean run)."""
    if record.run_dir is None:
        return None
    try:
        summary = read_json(Path(record.run_dir) / "summary.json")
        for task in (summary.get("tasks") or {}).values():
            base = (task.get(LOSSLESS.key) or {}).get("baseline_run")
            if base:
                path = Path(record.run_dir).parent / base
                engine = (read_json(path / "manifest.json").get("config") or {}).get("engine") or {}
                return None if engine.get("inject") else str(path)
    except (OSError, ValueError, AttributeError):
        return None  # a run that cannot be read names no baseline: each cell keeps run's own policy
    return None


def run_sweep(
    folder: Path,
    grid: Grid,
    run_args: list[str],
    on_cell: Callable[[int, int, Cell, CellRecord | None, bool], None] | None = None,
    speculative: bool = True,
    on_note: Callable[[int, int, Cell, str], None] | None = None,
) -> list[CellRecord]:
    """Every cell, base first, one at a time; a cell recorded as finished is not run again. on_cell(i, n, cell,
    record, resumed) is called before (record None) and after each cell; on_note(i, n, cell, why) when a record is
    set aside (damaged, another cell's, its run gone)."""
    cells = grid.cells()
    given = {a.split("=")[0] for a in run_args}
    # A server's cells keep `run`'s own policy (a baseline server's run, found again in the shared runs folder).
    choose_baseline = speculative and not given & {"--baseline", "--endpoint", "--baseline-endpoint"}
    records: list[CellRecord] = []
    baseline: str | None = None
    for i, cell in enumerate(cells):
        record, note = load_record(folder, cell)
        if note is not None and on_note is not None:
            on_note(i, len(cells), cell, note)
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
