"""The sweep's records, with a stand-in for `run` (a process that refuses, dies by a signal, or succeeds): no
secret reaches sweep.json or a cell's record, both owner-only; a cell that did not run is named with its reason
(the signal that killed it) and run again on resume; a damaged, stale or foreign record reruns its cell instead of
a traceback; two labels never share a record; a second sweep in the folder is refused; a grid too large is refused
before anything is written."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
from specdec_eval.evals.sweep import runner
from specdec_eval.evals.sweep.grid import Axis, Grid
from specdec_eval.evals.sweep.judge import NOT_RUN, judge
from specdec_eval.evals.sweep.runner import DONE, FAILED, NOT_STARTED, SweepSpec, check_folder, run_sweep
from specdec_eval.results.report.sweep_page import sweep_verdict

from specdec_eval.errors import UserError
from specdec_eval.records import locks

SECRETS = ("hf_SECRET1", "sk-SECRET2", "SECRET3", "SECRET4")
SERVE = "HF_TOKEN=hf_SECRET1 OPENAI_API_KEY=sk-SECRET2 server --api-key SECRET3 --seqs {seqs}"
RUN_ARGS = ["--endpoint", "http://127.0.0.1:1", "--api-key=SECRET4", "--tasks", "gsm8k_smoke"]


def _stand_in(monkeypatch, script: str) -> list[list[str]]:
    """`run` replaced by `python -c script` (its argv after the script: the cell's run flags); returns the calls."""
    calls: list[list[str]] = []

    def command(run_args, out):
        calls.append(list(run_args))
        return [sys.executable, "-c", script, *run_args, "--out", str(out)]

    monkeypatch.setattr(runner, "run_command", command)
    return calls


REFUSE = "import sys; print('specdec-eval: error: port 1 is in use', file=sys.stderr); sys.exit(2)"
KILL = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"


def _sweep(folder, grid, args=RUN_ARGS, notes=None):
    spec = SweepSpec([f"{a.name}=..." for a in grid.axes], grid.serve_cmd, list(args))
    notes = [] if notes is None else notes
    with check_folder(folder, spec):
        return run_sweep(folder, grid, list(args), speculative=False, on_note=lambda *a: notes.append(a[-1]))


def test_no_secret_reaches_the_sweeps_records_and_they_are_owner_only(monkeypatch, tmp_path):
    calls = _stand_in(monkeypatch, REFUSE)
    grid = Grid((Axis.parse("seqs=1,4"),), SERVE)
    records = _sweep(tmp_path / "sw", grid)
    assert any("SECRET3" in " ".join(c) for c in calls)  # the cell's run got the real key
    files = [tmp_path / "sw" / "sweep.json", *(tmp_path / "sw" / "cells").iterdir()]
    assert len(files) == 3
    for path in files:
        text = path.read_text(encoding="utf-8")
        assert not [s for s in SECRETS if s in text], (path, text)
        assert path.stat().st_mode & 0o777 == 0o600, path
    assert "HF_TOKEN=***" in (tmp_path / "sw" / "sweep.json").read_text(encoding="utf-8")
    assert not [s for s in SECRETS if s in json.dumps([r.command for r in records])]
    _sweep(tmp_path / "sw", grid)  # a resume with the same (real) secrets is the same sweep


def test_a_cell_killed_by_a_signal_is_named_not_passed_and_run_again_on_resume(monkeypatch, tmp_path):
    _stand_in(monkeypatch, KILL)
    grid = Grid((Axis.parse("batch=1,2"),))
    records = _sweep(tmp_path / "sw", grid)
    assert [r.status for r in records] == [FAILED, FAILED] and records[0].error == "killed by SIGKILL"
    verdicts = judge(records)
    assert [v.verdict for v in verdicts] == [NOT_RUN, NOT_RUN] and "SIGKILL" in verdicts[0].reasons[0]
    verdict, why = sweep_verdict([v.to_json() for v in verdicts])
    assert verdict == "FAIL" and "batch=1: NOT-RUN (run failed: killed by SIGKILL)" in why

    calls = _stand_in(monkeypatch, REFUSE)
    records = _sweep(tmp_path / "sw", grid)
    assert len(calls) == 2 and [r.status for r in records] == [NOT_STARTED, NOT_STARTED]
    calls = _stand_in(monkeypatch, REFUSE)
    _sweep(tmp_path / "sw", grid)
    assert len(calls) == 2  # a refusal (a busy port) is tried again: its reason may have passed


def test_two_labels_never_share_a_record_nor_does_a_long_one_overflow(monkeypatch, tmp_path):
    _stand_in(monkeypatch, REFUSE)
    grid = Grid((Axis.parse(f"batch=x+1:1,x_1:4,{'y' * 300}:8"),))
    _sweep(tmp_path / "sw", grid)
    names = sorted(p.name for p in (tmp_path / "sw" / "cells").iterdir())
    assert len(names) == 3 and all(len(n.encode()) < 255 for n in names), names
    recorded = {json.loads((tmp_path / "sw" / "cells" / n).read_text())["cell"] for n in names}
    assert recorded == {"batch=x+1", "batch=x_1", f"batch={'y' * 300}"}


def _finished(tmp_path, monkeypatch):
    """A one-cell sweep whose cell finished (a stand-in that prints a run folder), and its record's path."""
    run_dir = tmp_path / "elsewhere" / "r1"
    run_dir.mkdir(parents=True)
    (run_dir / "summary.json").write_text("{}")
    _stand_in(monkeypatch, f"print({json.dumps(json.dumps({'run_dir': str(run_dir)}))})")
    grid = Grid((Axis.parse("batch=1"),))
    (record,) = _sweep(tmp_path / "sw", grid, args=["--tasks", "t"])
    assert record.status == DONE
    return grid, runner.cell_path(tmp_path / "sw", grid.base), run_dir


@pytest.mark.parametrize(
    "damage, why",
    [
        (lambda p, d: p.write_bytes(b'{"cell": "batch=1", "sta'), "cannot be read (not valid JSON"),
        (lambda p, d: p.write_bytes(b'{"cell": "\xff"}'), "cannot be read (not UTF-8"),
        (lambda p, d: p.write_text(json.dumps({**json.loads(p.read_text()), "extra": 1})), "keys differ"),
        (lambda p, d: p.write_text(json.dumps({**json.loads(p.read_text()), "cell": "batch=9"})), "another cell's"),
        (lambda p, d: p.write_text(json.dumps({**json.loads(p.read_text()), "exit_code": "x"})), "wrong kind"),
        (lambda p, d: (d / "summary.json").unlink(), "its run's folder is gone"),
    ],
)
def test_a_damaged_stale_or_foreign_record_reruns_its_cell(monkeypatch, tmp_path, damage, why):
    grid, path, run_dir = _finished(tmp_path, monkeypatch)
    damage(path, run_dir)
    calls = _stand_in(monkeypatch, REFUSE)
    notes: list[str] = []
    (record,) = _sweep(tmp_path / "sw", grid, args=["--tasks", "t"], notes=notes)
    assert len(calls) == 1 and record.status == NOT_STARTED
    assert len(notes) == 1 and why in notes[0], notes


def test_a_damaged_plan_is_one_line(tmp_path):
    folder = tmp_path / "sw"
    folder.mkdir()
    (folder / "sweep.json").write_bytes(b'{"axes": ["\xff"]}')
    with pytest.raises(UserError, match="not UTF-8.*give a new --dir"):
        check_folder(folder, SweepSpec(["batch=1"], None, []))


def test_a_second_sweep_in_the_folder_is_refused(tmp_path):
    folder = tmp_path / "sw"
    spec = SweepSpec(["batch=1"], None, [])
    with check_folder(folder, spec):
        with pytest.raises(UserError, match="another sweep is running in"):
            check_folder(folder, spec)
        assert locks.is_locked(folder / runner.LOCK_NAME)
    check_folder(folder, spec).release()  # the first one ended: the folder resumes


def test_a_grid_too_large_is_refused_at_once(tmp_path):
    values = ",".join(str(i) for i in range(1000))
    start = time.monotonic()
    with pytest.raises(UserError, match=r"the grid has 1000000000 cells \(1000 x 1000 x 1000\), more than the 1024"):
        Grid(tuple(Axis.parse(f"{n}={values}") for n in ("batch", "draft-len", "tp")))
    assert time.monotonic() - start < 1.0  # counted, not built


def test_a_sweep_recorded_before_the_record_layer_resumes_and_loses_its_secrets(monkeypatch, tmp_path):
    """A folder as the sweep wrote it before: sweep.json and the cell records in clear, 0644, the cell's old name."""
    folder, run_dir = tmp_path / "sw", tmp_path / "elsewhere" / "r1"
    run_dir.mkdir(parents=True)
    (run_dir / "summary.json").write_text("{}")
    args = ["--tasks", "t", "--api-key=SECRET4"]
    (folder / "cells").mkdir(parents=True)
    (folder / "sweep.json").write_text(json.dumps({"axes": ["batch=..."], "serve_cmd": None, "run_args": args}))
    old = {"cell": "batch=1", "labels": {"batch": "1"}, "status": "finished", "exit_code": 0}
    old |= {"run_dir": str(run_dir), "error": "", "wall_s": 1.0, "command": ["run", *args]}
    (folder / "cells" / "batch=1.json").write_text(json.dumps(old, indent=2))
    calls = _stand_in(monkeypatch, REFUSE)
    (record,) = _sweep(folder, Grid((Axis.parse("batch=1"),)), args=args)
    assert not calls and record.status == DONE  # the finished cell is not run again
    for path in (folder / "sweep.json", folder / "cells" / "batch=1.json"):
        assert "SECRET4" not in path.read_text() and path.stat().st_mode & 0o777 == 0o600, path


@pytest.mark.parametrize("where", ["under-a-file", "/proc/self/sw"])
def test_a_folder_that_cannot_be_written_is_one_line(tmp_path, where):
    (tmp_path / "a-file").write_text("x")
    folder = tmp_path / "a-file" / "sw" if where == "under-a-file" else Path(where)
    with pytest.raises(UserError, match="cannot be written"):
        check_folder(folder, SweepSpec(["batch=1"], None, []))
