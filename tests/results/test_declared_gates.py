"""Readers of a run folder show any gate from its declaration (specdec_eval/gates): the opt-in truncated gate, which
no reader names, shows in the runs table, `decide`, the DataFrames and the report where a run recorded it, and adds
nothing where none did (a run judged without it reads exactly as before)."""

from __future__ import annotations

import pytest
from specdec_eval.results.decide import decide
from specdec_eval.results.frames import load_runs
from specdec_eval.results.report.data import load_run
from specdec_eval.results.report.gates import decide_run, gate_texts
from specdec_eval.results.runs_table import format_tasks, runs_table

from specdec_eval.gates import by_key, declarations, recorded
from specdec_eval.gates.truncated import GATE as TRUNCATED

from .test_report import _task
from .test_report_gates import _run
from .test_runs_table import TEST, make_run

CUT = {"verdict": "FAIL", "reason": "9 of 10 outputs (90.0 %) stopped at the output-length limit", "truncated": 9}
PASSING = {"score": 52.0, "threshold": 40.0, "verdict": "PASS"}


def test_every_declaration_is_found_by_its_key_and_judged_in_order():
    names = [d.name for d in declarations()]
    assert names[0] == "accuracy" and "truncated" in names  # the accuracy test first: the order gates judge in
    assert all(by_key(d.key) is d for d in recorded())


@pytest.fixture
def root(tmp_path):
    return tmp_path / "runs"


def test_an_opt_in_gate_is_shown_where_recorded(root):
    make_run(root, 1, tasks={"gsm8k": {**PASSING, TRUNCATED.key: CUT}})
    [row] = runs_table(root).rows
    task = row["tasks"]["gsm8k"]
    assert task[TRUNCATED.key] == "FAIL" and task[TRUNCATED.reason_column] == CUT["reason"]
    assert format_tasks(row).endswith(" truncated FAIL")
    assert "truncated" in load_runs(root).columns


def test_an_opt_in_gate_adds_nothing_where_no_run_recorded_it(root):
    make_run(root, 1, tasks={"gsm8k": PASSING})
    [row] = runs_table(root).rows
    assert set(row["tasks"]["gsm8k"]) == {
        *("score", "reference", "threshold", "verdict", "num_samples"),
        *("lossless", "lossless_reason", "acceptance_gate", "acceptance_reason", "acceptance_underpowered"),
    }
    assert "truncated" not in load_runs(root).columns


def test_decide_waives_on_an_opt_in_gate_with_its_reason(root, tmp_path):
    make_run(root, 1, test_id=TEST, tasks={"gsm8k": {**PASSING, TRUNCATED.key: CUT}})
    d = decide(TEST, "H200", root, tmp_path / "waives.txt")
    assert d.action == "waive"
    assert d.signature == f"gsm8k truncated FAIL: {CUT['reason']}"
    assert d.evidence[0]["tasks"]["gsm8k"][TRUNCATED.key] == "FAIL"


def test_the_report_names_an_opt_in_gate_that_failed(tmp_path):
    tasks = {"gsm8k": _task(75.0, 76.0, 72.5, "PASS", 10, truncated=CUT)}
    run = load_run(1, _run(tmp_path, "20300101-010000-cccccccccccc", tasks))
    assert gate_texts(run.tasks[0].summary)["truncated"].text == f"FAIL: {CUT['reason']}"
    assert "the truncated gate on gsm8k" in decide_run(run).sentence
