"""The drift check: a run whose later documents draft worse shows DECAY with a small p-value; a run with no trend,
or one that improves, does not. Per task, in the order requests were sent: two tasks of constant but different
acceptance are no trend, however their rows are ordered; a run recorded without send times says it cannot be
ordered by time."""

from __future__ import annotations

import random

import pytest
from specdec_eval.evals.sweep.drift import (
    DECAY,
    NO_TREND,
    TOO_FEW,
    UntimedRun,
    document_lengths,
    drift_per_task,
    drift_test,
    task_lengths_in_time,
)
from specdec_eval.results.sample_record import SampleRecord
from specdec_eval.results.store import new_run

from ...cli_helpers import run_cli


def _noisy(trend: float, n: int = 60, seed: int = 0) -> list[float]:
    rng = random.Random(seed)
    return [2.5 + trend * i + rng.gauss(0.0, 0.25) for i in range(n)]


def test_a_decay_is_found_and_a_flat_or_rising_run_is_not():
    decaying = drift_test(_noisy(-0.01))  # -1 AL per 100 documents
    assert decaying.verdict == DECAY and decaying.p_decay < 0.01 and decaying.slope_per_100 < -0.5
    assert decaying.second_half_al < decaying.first_half_al
    for trend in (0.0, 0.01):
        assert drift_test(_noisy(trend, seed=1)).verdict == NO_TREND
    assert drift_test([2.0] * 20).verdict == NO_TREND  # no spread: no trend
    assert drift_test([2.0, 1.5]).verdict == TOO_FEW


def test_lengths_come_from_each_documents_counts_in_run_order():
    samples = [
        SampleRecord(task="t", doc_id=i, acceptance={"num_cycles": 10, "num_accepted_drafts": a})
        for i, a in enumerate((20, 0, 5))
    ]
    samples.insert(1, SampleRecord(task="t", doc_id=9))  # drafted nothing: left out
    assert document_lengths(samples) == [3.0, 1.0, 1.5]


def _two_tasks(timed: bool, docs: int = 10) -> list[SampleRecord]:
    """Task a drafts at acceptance 3.0 throughout, task b at 1.0; rows task by task, requests interleaved in time."""
    out = []
    for task, accepted in (("a", 20), ("b", 0)):
        for d in range(docs):
            sent = 1_800_000_000.0 + 2 * d + (task == "a")
            times = {"sent_at": sent, "finished_at": sent + 0.5} if timed else {}
            counts = {"num_cycles": 10, "num_accepted_drafts": accepted}
            out.append(SampleRecord(task=task, doc_id=d, acceptance=counts, **times))
    return out


def test_two_tasks_of_constant_acceptance_are_no_trend():
    """Row order (task, document) read as time made this DECAY (tau -0.73, p 8e-05): task a's rows first."""
    samples = _two_tasks(timed=True)
    series = task_lengths_in_time(samples)
    assert series == {"a": [3.0] * 10, "b": [1.0] * 10}
    results = drift_per_task(series)
    assert {t: d.verdict for t, d in results.items()} == {"a": NO_TREND, "b": NO_TREND}
    assert all(d.alpha == 0.025 for d in results.values())  # two tasks tested: each at alpha / 2


def test_a_task_is_ordered_by_send_time_not_by_row():
    rows = [
        SampleRecord(task="t", doc_id=i, acceptance={"num_cycles": 10, "num_accepted_drafts": 10 * i}, sent_at=-i)
        for i in range(10)
    ]  # document 9 was sent first: in time, acceptance falls
    assert task_lengths_in_time(rows) == {"t": [1.0 + i for i in reversed(range(10))]}
    assert drift_per_task(task_lengths_in_time(rows))["t"].verdict == DECAY


def test_a_run_without_send_times_cannot_be_ordered(tmp_path):
    with pytest.raises(UntimedRun, match="cannot order its documents by time"):
        task_lengths_in_time(_two_tasks(timed=False), "run r")


def _recorded(tmp_path, samples) -> str:
    run = new_run(tmp_path, "drift")
    run.write_samples(samples)
    run.write_manifest({"config": {}})
    run.write_summary({"verdict": "PASS", "tasks": {"a": {}, "b": {}}})
    run.release()
    return str(run.path)


def test_the_command_per_task_and_for_a_run_recorded_before_send_times(tmp_path, capsys):
    code, out, err = run_cli(capsys, "drift", _recorded(tmp_path, _two_tasks(timed=True)))
    assert code == 0 and err == ""
    assert [line.split()[1:3] for line in out.splitlines()] == [["a:", "NO-TREND"], ["b:", "NO-TREND"]]
    code, out, err = run_cli(capsys, "drift", _recorded(tmp_path, _two_tasks(timed=False)))  # an old run folder
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "cannot order its documents by time" in err
    code, out, _ = run_cli(capsys, "drift", _recorded(tmp_path, _two_tasks(timed=True, docs=3)))
    assert code == 0 and "a: TOO-FEW: 3 document(s) drafted; a trend needs at least 8 (not tested)" in out
