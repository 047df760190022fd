"""A sample as a value (results/sample_record.py): a row of samples.parquet and back, its columns in the order the
pipeline has always written them, and runs recorded before the typed records (tests/results/old_runs/: a spec-dec
run of the tiny model and its paired twins, recorded by the code before the redesign, d589ec6's store format) still
load, compare, pass the lossless check and report."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow.parquet as pq
from specdec_eval.evals.lossless.check import lossless_check
from specdec_eval.results import store
from specdec_eval.results.compare import compare_runs
from specdec_eval.results.report import build_report
from specdec_eval.results.sample_record import SampleRecord

OLD_RUNS = Path(__file__).resolve().parent / "old_runs"


def test_a_row_and_its_record_are_the_same_sample():
    row = {
        "task": "gsm8k",
        "doc_id": 3,
        "doc_hash": "d",
        "prompt_hash": "p",
        "target": "12",
        "output": "x",
        "output_hash": "h",
        "num_output_tokens": 2,
        "output_token_ids": [5, 6],
        "logprobs": None,
        "finish_reason": "stop",
        "error": None,
        "acceptance_length": 1.5,
        "acceptance": {"num_cycles": 2},
        "extracted[strict-match]": "12",
        "correct[strict-match]": True,
        "extracted[flexible-extract]": "[invalid]",
        "correct[flexible-extract]": False,
        "written_by_a_newer_version": 7,
    }
    record = SampleRecord.from_row(row)
    assert record.correct == {"strict-match": True, "flexible-extract": False} and record.score == 0.5
    assert record.extracted["strict-match"] == "12" and record.extra == {"written_by_a_newer_version": 7}
    assert record.to_row() == row and list(record.to_row()) == list(row)  # the same columns, in the same order
    assert not record.failed and record.replace(finish_reason="error").failed


def test_a_sealed_record_keeps_its_sealed_fields_column():
    record = SampleRecord("gpqa_diamond", 0, output_token_ids=[1], sealed_fields=["output_token_ids"])
    assert record.to_row()["sealed_fields"] == ["output_token_ids"]
    assert "sealed_fields" not in SampleRecord("gsm8k", 0).to_row()  # as before: only a sealed task's rows have it


def test_runs_recorded_before_typed_records_load_compare_and_report(tmp_path):
    shutil.copytree(OLD_RUNS, tmp_path / "runs")
    runs = store.list_runs(tmp_path / "runs")
    spec = next(r for r in runs if r.summary().get("spec"))
    twins = next(r for r in runs if not r.summary().get("spec"))
    columns = pq.read_table(twins.path / "samples.parquet").column_names
    assert "_acceptance" in columns  # the old writer let a run-time key leak into a plain run's columns
    old, base = spec.samples(), twins.samples()
    assert len(old) == 4 and all(isinstance(s, SampleRecord) and s.correct and s.output_token_ids for s in old)
    assert base[0].extra == {"_acceptance": None}  # kept as it is, never taken for a field
    assert lossless_check(old, base, "float32")["gsm8k"].verdict == "PASS"
    compared = compare_runs(twins, spec)["tasks"]["gsm8k"]
    assert compared["outputs"]["identical"] == 4 and compared["n"] == 4
    html, markdown = build_report([spec])
    assert "gsm8k" in html and "gsm8k" in markdown


def test_a_sampled_outputs_prompt_and_parameters_travel_through_the_store(tmp_path):
    """What the sampled lossless verdict's scorer reads (evals/lossless/scoring.py); a greedy row has neither."""
    from specdec_eval.results import store

    sampled = SampleRecord(
        "gsm8k_sampled",
        1,
        output_token_ids=[5, 6],
        prompt_token_ids=[1, 2, 3],
        sampling={"temperature": 0.7, "top_k": 0, "top_p": 1.0},
    )
    greedy = SampleRecord("gsm8k", 2, output_token_ids=[7])
    assert "prompt_token_ids" not in greedy.to_row() and "sampling" not in greedy.to_row()
    run = store.Run(tmp_path)
    run.write_samples([sampled, greedy])
    back = {r.doc_id: r for r in run.samples()}
    assert list(back[1].prompt_token_ids) == [1, 2, 3] and dict(back[1].sampling) == dict(sampled.sampling)
    assert back[2].prompt_token_ids is None and back[2].sampling is None


def test_send_and_finish_times_travel_through_the_store_and_old_rows_have_none(tmp_path):
    """What `drift` orders a task's documents by; a run recorded before they were kept reads them as None."""
    from specdec_eval.results import store

    timed = SampleRecord("gsm8k", 1, sent_at=1_800_000_000.25, finished_at=1_800_000_001.5)
    old = SampleRecord("gsm8k", 2)
    assert not {"sent_at", "finished_at", "logprobs_problem"} & set(old.to_row())  # rows as before
    run = store.Run(tmp_path)
    run.write_samples([old])  # a folder whose samples.parquet has no such columns
    assert run.samples()[0].sent_at is None and run.samples()[0].finished_at is None
    run.write_samples([timed, old])
    back = {r.doc_id: r for r in run.samples()}
    assert (back[1].sent_at, back[1].finished_at) == (1_800_000_000.25, 1_800_000_001.5)
    assert back[2].sent_at is None and not back[2].extra
