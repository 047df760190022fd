"""`ab`'s options for the paired acceptance test (--acceptance-drop, --beta, --decide-on): checked before anything
runs, handed to the A/B as given, and a drop of B's acceptance shown ends `ab` with exit status 1 even when the
accuracy reads no change (a quiet drafter regression changes no output)."""

from __future__ import annotations

import json

import pytest
from specdec_eval.evals.sequential import commit_ab

from ..cli_helpers import run_cli
from .test_one_line_errors import SMOKE, _one_error_line


@pytest.mark.parametrize(
    ("flag", "value", "words"),
    [
        ("--decide-on", "bogus", "--decide-on must be one of both, accuracy, acceptance, got 'bogus'"),
        ("--beta", "2", "--beta must be between 0 and 1 (exclusive), got 2"),
        ("--acceptance-drop", "0", "--acceptance-drop must be between 0 and 1 (exclusive), got 0"),
    ],
)
def test_bad_acceptance_options_are_one_line_before_anything_runs(flag, value, words, tmp_path, capsys):
    line = _one_error_line(
        *run_cli(
            capsys,
            "ab",
            "HEAD",
            "HEAD",
            "--repo",
            str(tmp_path),
            flag,
            value,
            "--out",
            str(tmp_path / "runs"),
            "--",
            *SMOKE,
        )[::2]
    )
    assert line == f"specdec-eval: error: {words}"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("drops", [["gsm8k"], []])
def test_the_options_reach_the_ab_and_a_shown_acceptance_drop_exits_1(drops, tmp_path, capsys, monkeypatch):
    plans = []

    def fake_run_ab(plan, say):  # the two sides and their comparison, as run_ab returns them
        plans.append(plan)
        return {"verdict": "no significant change", "acceptance_drops": drops, "tasks": {}}

    monkeypatch.setattr(commit_ab, "run_ab", fake_run_ab)
    options = ["--early-stop", "--decide-on", "acceptance", "--acceptance-drop", "0.03", "--beta", "0.1", "--json"]
    code, out, err = run_cli(capsys, "ab", "A", "B", "--repo", str(tmp_path), *options, "--", *SMOKE)
    assert code == (1 if drops else 0), err
    assert json.loads(out)["acceptance_drops"] == drops
    (plan,) = plans
    assert (plan.decide_on, plan.acceptance_drop, plan.beta, plan.early_stop) == ("acceptance", 0.03, 0.1, True)
