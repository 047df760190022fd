"""`run --gate truncated[=SHARE]` end to end on the tiny preset: its outputs are cut at 4 tokens, so asked for at a
share below all of them the gate FAILs the run (exit 1), the task's line and summary.json say why; not asked for,
the same run PASSes its gates as before and its summary has no such record."""

from __future__ import annotations

import json

from ...cli_helpers import run_cli

RUN = ("run", "--tasks", "gsm8k_smoke", "--limit", "2", "--max-output-len", "4", "--model", "tiny")
FAST = ("--device-memory", "256MiB")


def test_outputs_cut_off_fail_the_opt_in_gate(capsys, tmp_path):
    code, out, err = run_cli(capsys, *RUN, *FAST, "--gate", "truncated=0.5", "--out", str(tmp_path / "runs"))
    assert code == 1, err
    assert "truncated gate: FAIL (2 of 2 outputs (100.0 %) stopped at the output-length limit" in out
    task_line = next(line for line in out.splitlines() if line.startswith("gsm8k_smoke "))
    assert task_line.endswith("REPORT  truncated FAIL")
    (summary,) = (tmp_path / "runs").glob("*/summary.json")
    record = json.loads(summary.read_text())
    assert record["verdict"] == "FAIL" and record["tasks"]["gsm8k_smoke"]["truncated"]["verdict"] == "FAIL"


def test_without_the_gate_the_run_is_judged_as_before(capsys, tmp_path):
    code, out, err = run_cli(capsys, *RUN, *FAST, "--json", "--out", str(tmp_path / "runs"))
    assert code == 0, err
    record = json.loads(out)
    assert "truncated" not in record["tasks"]["gsm8k_smoke"] and record["verdict"] == "PASS"
    code, out, err = run_cli(capsys, *RUN, *FAST, "--gate", "truncated=1", "--json", "--out", str(tmp_path / "r2"))
    assert code == 0, err  # every output cut, and a share of 1 allows that
    assert json.loads(out)["tasks"]["gsm8k_smoke"]["truncated"]["verdict"] == "PASS"


def test_an_unknown_gate_is_one_line_before_anything_runs(capsys, tmp_path):
    code, out, err = run_cli(capsys, *RUN, *FAST, "--gate", "nope", "--out", str(tmp_path / "runs"))
    assert code == 2 and err.strip() == "specdec-eval: error: --gate nope: no opt-in gate 'nope'; known: truncated"
    assert not (tmp_path / "runs").exists()
