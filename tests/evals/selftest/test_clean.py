"""`selftest --clean` (evals/selftest/clean.py): no unmutated run FAILs, on every backend and mode the tool supports.
The rows are a registry (one line adds a backend); a row's result is read from its run's exit status and summary;
CI runs the matrix at a size it can afford (tiny, two documents of eight tokens; SmolLM2 where the row is ours)."""

from __future__ import annotations

import json

import pytest
from specdec_eval.evals.selftest.clean import ROWS, CleanRow, judge_row, run_clean, select_rows

from ...cli.test_run_cli import SHARED_DATA, needs_shared_data
from ...cli_helpers import run_cli


def test_the_rows_cover_every_backend_and_mode():
    ours = [r for r in ROWS if r.backend == "local"]
    assert len(ours) == 16  # tiny / SmolLM2 x float32 / bfloat16 x greedy / sampled x paired / separate
    assert {r.backend for r in ROWS} >= {"local", "serve", "llamacpp"}
    assert {r.sampled for r in ROWS if r.backend != "local"} == {False, True}
    assert [r.name for r in select_rows(["serve"])] == [r.name for r in ROWS if r.backend == "serve"]
    assert CleanRow("vllm eagle3: greedy", "vllm", ("--endpoint", "{spec}")).name  # a new backend is one line


def _summary(verdict: str, reason: str = "") -> str:
    return json.dumps({"tasks": {"gsm8k": {"lossless": {"verdict": verdict, "reason": reason}}}})


def test_a_row_is_a_false_fail_when_any_gate_or_the_exit_status_says_fail():
    assert judge_row(0, _summary("PASS"), "")["result"] == "PASS"
    assert judge_row(0, _summary("NO-GATE"), "")["result"] == "PASS"  # could not judge: no false FAIL
    failed = judge_row(1, _summary("FAIL", "the spec-dec engine changes the target's own outputs"), "")
    assert failed["result"] == "FALSE FAIL" and failed["reason"].startswith("the spec-dec engine changes")
    assert judge_row(1, _summary("PASS"), "run: 2 requests failed\n")["result"] == "FALSE FAIL"
    error = judge_row(2, "", "specdec-eval: error: no such file\n")
    assert error["result"] == "ERROR" and error["reason"] == "specdec-eval: error: no such file"


def test_an_unknown_row_is_one_line_and_exit_2(capsys):
    code, _, err = run_cli(capsys, "selftest", "--clean", "--only", "no-such-row")
    assert code == 2 and "no clean row matches no-such-row" in err and len(err.strip().splitlines()) == 1


CI_ROWS = (
    "ours tiny: bfloat16, greedy, paired",
    "ours tiny: bfloat16, sampled, separate",
    "ours smollm2: bfloat16, greedy, paired",
    "serve eagle3 (rejection) vs plain: sampled",
    "llamacpp plain vs plain: sampled",
)


@pytest.mark.slow
@needs_shared_data
def test_no_unmutated_run_fails(tmp_path):
    """The CI size of the matrix: two documents of eight tokens on five rows, where false FAILs were found or could
    hide: bf16 on tiny (the twin audit, a separate baseline with its control), SmolLM2 (its shipped acceptance
    reference), our server sampled, and llama.cpp's legacy shapes (when installed; CI has it)."""
    rows = [r for r in ROWS if r.name in CI_ROWS]
    assert len(rows) == len(CI_ROWS)
    shared = [
        "--tasks",
        "gsm8k",
        "--limit",
        "2",
        "--sample",
        "random",
        "--no-reference",
        "--data-dir",
        str(SHARED_DATA),
        "--max-output-len",
        "8",
        "--num-fewshot",
        "0",
    ]
    report = run_clean(rows, shared, workdir=str(tmp_path))
    table = "\n".join(f"{r['row']}: {r['result']} {r.get('reason', '')}" for r in report["rows"])
    assert report["false_fails"] == 0 and report["errors"] == 0, table
