"""Runs and samples as pandas DataFrames (results/frames.py), and `compare`'s join of two runs' samples done
by pandas (results/paired.py `pair_samples` over `paired_frame`)."""

from __future__ import annotations

import pandas as pd
import pytest
from specdec_eval.results.frames import load_runs, load_samples, paired_frame, samples_frame
from specdec_eval.results.paired import pair_samples
from specdec_eval.results.sample_record import SampleRecord

from .test_compare import samples, task_summary
from .test_runs_table import make_run

CORRECT = [True, False, True, True]
TOKENS = [[1, 2], [3], [4, 5, 6], [7]]


def test_load_samples_one_row_per_sample_with_its_score(tmp_path):
    rows = samples(CORRECT, TOKENS)
    rows[1]["correct[strict-match]"] = True  # one filter of two right: a score of 0.5
    run = make_run(tmp_path, 1, samples=rows, tasks={"gsm8k": task_summary(CORRECT)})
    frame = load_samples(run)
    assert len(frame) == 4 and list(frame.columns[:4]) == ["run_id", "task", "doc_id", "score"]
    assert (frame["run_id"] == run.run_id).all() and frame["doc_id"].tolist() == [0, 1, 2, 3]
    assert frame["score"].tolist() == [1.0, 0.5, 1.0, 1.0]
    assert frame["output_token_ids"].tolist() == TOKENS  # lists, as the store gives them back
    assert frame.groupby("task")["acceptance_length"].mean()["gsm8k"] == 2.0
    by_id = load_samples(run.run_id, tmp_path)  # a run id under the runs folder works too
    pd.testing.assert_frame_equal(frame, by_id)


def test_load_runs_one_row_per_run_and_task(tmp_path):
    make_run(
        tmp_path,
        1,
        tasks={
            "gsm8k": {"score": 41.0, "threshold": 40.0, "verdict": "PASS"},
            "gpqa_diamond": {"score": 20.0, "threshold": 30.0, "verdict": "FAIL"},
        },
    )
    make_run(tmp_path, 2, tasks={"gsm8k": {"score": 10.0, "reference": None, "threshold": None, "verdict": "REPORT"}})
    make_run(tmp_path, 3, finished=False)
    runs = load_runs(tmp_path)
    finished = runs[["task", "score", "task_verdict"]].iloc[:3].values.tolist()
    assert finished == [["gpqa_diamond", 20.0, "FAIL"], ["gsm8k", 41.0, "PASS"], ["gsm8k", 10.0, "REPORT"]]
    assert runs.iloc[3][["task", "score", "task_verdict"]].isna().all()  # an unfinished run: no task
    assert runs["verdict"].tolist() == ["FAIL", "FAIL", "NO-GATE", "unfinished"]  # the run's, as readers show it
    assert runs.groupby("run_id", sort=False)["task"].count().tolist() == [2, 1, 0]
    assert str(runs["started"].dtype).startswith("datetime64") and runs["started"].is_monotonic_increasing
    assert load_runs(tmp_path, commit="ffff").empty


def test_a_folder_that_is_not_a_run_or_a_store_is_an_error_not_an_empty_frame(tmp_path):
    (tmp_path / "not-a-run").mkdir()
    with pytest.raises(FileNotFoundError, match="not-a-run is not a run folder .* pass the runs folder as root"):
        load_samples(tmp_path / "not-a-run")  # had raised TypeError from Path(None)
    with pytest.raises(FileNotFoundError, match="runs folder .*missing does not exist"):
        load_runs(tmp_path / "missing")
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(NotADirectoryError, match="a-file is a file, not a folder of runs"):
        load_runs(tmp_path / "a-file")
    assert load_runs(tmp_path / "not-a-run").empty  # a folder holding no runs yet is an empty store


def test_an_unfinished_run_and_a_single_run_folder_say_so_instead_of_empty_frames(tmp_path):
    unfinished = make_run(tmp_path, 1, finished=False)
    with pytest.raises(ValueError, match=f"run {unfinished.run_id} is unfinished .* resumes it"):
        load_samples(unfinished.path)
    finished = make_run(tmp_path, 2, samples=samples(CORRECT, TOKENS), tasks={"gsm8k": task_summary(CORRECT)})
    with pytest.raises(ValueError, match="is one run's folder, not a folder of runs: load_runs"):
        load_runs(finished.path)
    assert len(load_samples(finished.path)) == 4 and len(load_runs(tmp_path)) == 2


def test_paired_frame_joins_on_task_and_doc():
    a = samples_frame(samples(CORRECT, TOKENS))
    b = samples_frame([s for s in samples([False] * 4, TOKENS) if s["doc_id"] != 0] + samples([True], [[9]], "gpqa"))
    joined = paired_frame(a, b)
    keys = joined[["task", "doc_id", "side"]].values.tolist()
    assert keys == [
        ["gsm8k", 0, "a"],
        ["gsm8k", 1, "both"],
        ["gsm8k", 2, "both"],
        ["gsm8k", 3, "both"],
        ["gpqa", 0, "b"],
    ]
    both = joined[joined["side"] == "both"]
    assert both["correct[flexible-extract]_a"].tolist() == [False, True, True]
    assert not both["correct[flexible-extract]_b"].any()


def test_pair_samples_keeps_its_contract():
    """What compare and the lossless gate rely on: pairs ordered by doc id (numbers before names), the unpaired docs
    per task, a doc id 3 apart from a doc id "3", refusals of a duplicate or a changed prompt."""
    rows_a = [{"task": "gsm8k", "doc_id": "x", "prompt_hash": "h"}, *reversed(samples([True] * 3, [[1], [2], [3]]))]
    rows_b = [
        *list(reversed(samples([True] * 3, [[1], [2], [3]])))[:2],
        {"task": "gsm8k", "doc_id": "0", "prompt_hash": "q"},
    ]
    a, b = [SampleRecord.from_row(r) for r in rows_a], [SampleRecord.from_row(r) for r in rows_b]
    pairs = pair_samples(a, b)
    assert [(x.doc_id, y.doc_id) for x, y in pairs["gsm8k"]] == [(1, 1), (2, 2)]
    assert all(x is a[3 - x.doc_id] for x, _ in pairs["gsm8k"])  # the samples themselves, not copies
    assert pairs.unpaired == {"gsm8k": {"only_a": [0, "x"], "only_b": ["0"]}}
    assert type(pairs.unpaired["gsm8k"]["only_a"][0]) is int  # JSON-ready, not a numpy integer
    with pytest.raises(ValueError, match="run B holds task 'gsm8k' doc 1 twice"):
        pair_samples(a, b + [b[1]])
    changed = [s.replace(prompt_hash="other") if s.doc_id == 2 else s for s in b]
    with pytest.raises(ValueError, match=r"1 paired sample\(s\) have different prompts \(first: task 'gsm8k' doc 2"):
        pair_samples(a, changed)
    assert pair_samples([], []) == {} and pair_samples([], []).unpaired == {}
    unhashed = [SampleRecord("t", 0)]  # runs recorded before prompt hashes: None on both sides pairs
    assert len(pair_samples(unhashed, unhashed)["t"]) == 1
