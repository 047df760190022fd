"""A sweep cell whose server's URL still answers (the previous cell's server not yet gone): `run` refuses it in one
line (exit 2), and the cell is started again until the port is free, or recorded as failed (retried on resume),
never as a cell that cannot start, and never run against the old server."""

from __future__ import annotations

import sys

from specdec_eval.evals.sweep import runner
from specdec_eval.evals.sweep.grid import Axis, Grid

# A stand-in for `run`: refuses the URL while FILE holds a number > 0 (counting down), then finishes a run.
FAKE_RUN = """
import json, pathlib, sys
state = pathlib.Path(sys.argv[1])
left = int(state.read_text())
if left != 0:
    state.write_text(str(left - 1))
    print("specdec-eval: error: http://127.0.0.1:8000 already answers (HTTP 200)", file=sys.stderr)
    sys.exit(2)
print(json.dumps({"run_dir": "runs/x"}))
"""


def _cell(tmp_path, monkeypatch, busy_times: int):
    script, state = tmp_path / "fake_run.py", tmp_path / "state"
    script.write_text(FAKE_RUN)
    state.write_text(str(busy_times))
    monkeypatch.setattr(runner, "run_command", lambda args, out: [sys.executable, str(script), str(state)])
    monkeypatch.setattr(runner, "PORT_POLL_S", 0.05)
    monkeypatch.setattr(runner, "PORT_WAIT_S", 5.0)
    grid = Grid((Axis.parse("batch=1,4"),))
    return grid, grid.cells()[1], state


def test_a_cell_waits_for_the_previous_cells_server_to_let_go_of_the_port(tmp_path, monkeypatch):
    grid, cell, state = _cell(tmp_path, monkeypatch, busy_times=3)
    record = runner.run_cell(tmp_path, grid, cell, [], [])
    assert record.status == runner.DONE and record.run_dir == "runs/x" and state.read_text() == "0"


def test_a_port_that_stays_busy_is_a_retryable_failure(tmp_path, monkeypatch):
    grid, cell, _ = _cell(tmp_path, monkeypatch, busy_times=-1)  # never free
    monkeypatch.setattr(runner, "PORT_WAIT_S", 0.3)
    record = runner.run_cell(tmp_path, grid, cell, [], [])
    assert record.status == runner.FAILED and not record.finished  # a resumed sweep runs it again
    assert record.error.startswith("could not start: port busy after") and "already answers" in record.error
