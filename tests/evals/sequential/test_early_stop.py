"""Sequential verdicts and random subsets in the run: a collapsed drafter FAILs the acceptance gate
within the first batch, a lossy spec-dec step FAILs the lossless gate at its first divergent sample, a hopeless
accuracy FAILs at the first look, and `--sample random` takes a seeded random subset recorded in the manifest."""

from __future__ import annotations

import functools
import json
import textwrap
from pathlib import Path

import pytest
from specdec_eval.evals.gates import references
from specdec_eval.evals.sequential.accuracy import AccuracySequentialDesign
from specdec_eval.evals.sequential.early_stop import EarlyStop

from ...cli.test_run_cli import SHARED_DATA, needs_shared_data, run_cli

TINY = ("--model", "tiny", "--device-memory", "256MiB", "--data-dir", str(SHARED_DATA), "--num-fewshot", "1")
TEST_ID = "accuracy/test_specdec.py::Testtiny::test_eagle3[v1_kv_cache-one_model-tp1]"


def _runs(out: Path) -> list[tuple[dict, dict]]:
    return [
        (json.loads((d / "manifest.json").read_text()), json.loads((d / "summary.json").read_text()))
        for d in sorted(out.iterdir())
        if (d / "summary.json").exists()
    ]


def _spec_run(out: Path) -> tuple[dict, dict]:
    (run,) = [(m, s) for m, s in _runs(out) if m["config"]["engine"]["spec"] is not None]
    return run


@needs_shared_data
def test_a_collapsed_drafter_fails_the_acceptance_gate_in_the_first_batch(capsys, tmp_path):
    refs = tmp_path / "al.yaml"
    refs.write_text(f"{TEST_ID}:\n  ref_al: 2.0\n  min_al: 1.9\n  max_draft_len: 3\n")
    code, out, err = run_cli(
        capsys,
        "run",
        "--tasks",
        "gsm8k",
        "--limit",
        "24",
        "--early-stop",
        "--early-stop-batch",
        "8",
        "--max-output-len",
        "40",
        "--spec",
        "eagle3",
        "--draft-model",
        "random",
        "--no-reference",
        "--acceptance-refs",
        str(refs),
        "--out",
        str(tmp_path / "runs"),
        *TINY,
    )
    assert code == 1, err
    _, summary = _spec_run(tmp_path / "runs")
    task = summary["tasks"]["gsm8k"]
    assert task["stopped"]["gate"] == "acceptance" and task["stopped"]["n"] == 8 and task["stopped"]["of"] == 24
    assert task["acceptance_gate"]["verdict"] == "FAIL" and summary["verdict"] == "FAIL"
    assert task["num_samples"] == 8 and "stopped early at 8 of 24 documents by the acceptance gate" in out
    # The gate round-trips: populating with the run's own AL makes the same run pass it.
    assert refs.read_text().startswith(TEST_ID)


@needs_shared_data
def test_a_lossy_spec_step_fails_the_lossless_gate_at_its_first_divergence(capsys, tmp_path):
    code, out, err = run_cli(
        capsys,
        "run",
        "--tasks",
        "gsm8k",
        "--limit",
        "24",
        "--early-stop",
        "--early-stop-batch",
        "4",
        "--max-output-len",
        "24",
        "--spec",
        "eagle3",
        "--inject",
        "emit_rejected_draft",
        "--no-reference",
        "--out",
        str(tmp_path / "runs"),
        *TINY,
    )
    assert code == 1, err
    manifest, summary = _spec_run(tmp_path / "runs")
    task = summary["tasks"]["gsm8k"]
    assert task["stopped"]["gate"] == "lossless" and task["stopped"]["n"] < 24
    assert task["lossless"]["verdict"] == "FAIL" and task["lossless"]["divergent"] >= 1
    assert "first divergent sample" in task["stopped"]["reason"]
    # the seeded random order is recorded, and both runs were paired from one prefill
    assert manifest["orders"]["gsm8k"]["how"] == "random" and len(manifest["orders"]["gsm8k"]["order"]) == 24
    base = [m for m, _ in _runs(tmp_path / "runs") if m["config"]["engine"]["spec"] is None]
    assert base and base[0]["paired_with"] == manifest["run_id"]


@needs_shared_data
def test_a_hopeless_score_fails_the_accuracy_gate_at_an_early_look(capsys, tmp_path, monkeypatch):
    """A score of ~0 against a reference of 60: the design's FAIL boundary is crossed long before n_max (the first
    looks spend little alpha, so it may take the second)."""
    from specdec_eval.evals.pipeline import evaluation as runner

    folder = tmp_path / "refs"
    folder.mkdir()
    (folder / "gsm8k.yaml").write_text(
        textwrap.dedent("""\
        X:
          - accuracy: 60.0
            command: test fixture
        """)
    )
    monkeypatch.setattr(runner, "lookup", functools.partial(references.lookup, reference_dir=folder))
    code, out, err = run_cli(
        capsys,
        "run",
        "--tasks",
        "gsm8k",
        "--limit",
        "40",
        "--early-stop",
        "--early-stop-batch",
        "8",
        "--max-output-len",
        "8",
        "--model-key",
        "X",
        "--out",
        str(tmp_path / "runs"),
        *TINY,
    )
    assert code == 1, err
    ((_, summary),) = _runs(tmp_path / "runs")
    task = summary["tasks"]["gsm8k"]
    n = task["stopped"]["n"]
    assert task["verdict"] == "FAIL" and task["stopped"]["gate"] == "accuracy" and n in (8, 16)
    assert f"sequential verdict at n={n}: FAIL" in out and task["num_samples"] == n


@needs_shared_data
def test_random_subset_is_seeded_and_noted(capsys, tmp_path):
    args = (
        "run",
        "--tasks",
        "gsm8k",
        "--limit",
        "4",
        "--sample",
        "random",
        "--max-output-len",
        "4",
        "--no-reference",
        *TINY,
    )
    code, _, err = run_cli(capsys, *args, "--out", str(tmp_path / "a"))
    assert code == 0, err
    code, _, err = run_cli(capsys, *args, "--out", str(tmp_path / "b"), "--eval-seed", "1")
    assert code == 0, err
    (ma, sa), (mb, _) = _runs(tmp_path / "a")[0], _runs(tmp_path / "b")[0]
    docs = sorted(ma["orders"]["gsm8k"]["order"])
    assert docs != [0, 1, 2, 3] and len(docs) == 4 and sa["tasks"]["gsm8k"]["n_total"] == 1319
    assert sorted(mb["orders"]["gsm8k"]["order"]) != docs  # another seed, another subset


def test_no_gate_never_stops_a_task_on_accuracy():
    """Where the accuracy gate cannot fail (a reference near the floor), early stopping leaves the task to the
    other gates: a look never stops it, whatever the score."""
    design = AccuracySequentialDesign.for_batches(1.0, 64, 16)
    assert not design.can_fail
    stop = EarlyStop(lambda task, n: design, batch=16)
    stop.start("t", 64)
    for i in range(32):
        stop.observe("t", i, 100.0, None, None, i)
    stop.after_batch("t")
    assert stop.is_open("t") and stop.record("t") is None


@pytest.mark.parametrize("exact, stops", [(True, True), (False, False)])
def test_divergence_stops_only_where_any_divergence_fails(exact, stops):
    stop = EarlyStop(lambda task, n: None, batch=4, exact=exact)
    stop.start("t", 8)
    for i in range(4):
        stop.observe("t", i, 0.0, None, 3 if i == 2 else None, i)
    stop.after_batch("t")
    assert (not stop.is_open("t")) == stops


def test_a_sampled_tasks_tripwire_reads_the_reference_of_its_own_decoding():
    """A sampled task's early acceptance FAIL is judged against the entry keyed by its decoding, never the greedy one
    (which does not apply to it: no early verdict from it at all)."""
    sampled = f"{TEST_ID}::sampled[temperature=0.7,top_k=20,top_p=0.9,rejection]"
    refs = {TEST_ID: {"ref_al": 2.0, "min_al": 1.9}, sampled: {"ref_al": 2.0, "min_al": 1.9, "temperature": 0.7}}
    collapsed = {
        "num_cycles": 40,
        "num_draft_tokens": 120,
        "num_accepted_drafts": 0,
        "accepted_per_position": [0] * 3,
        "max_draft_len": 3,
    }

    def stopped(reference_ids):
        stop = EarlyStop(
            lambda task, n: None,
            8,
            TEST_ID,
            refs,
            max_draft_len=3,
            temperatures={"gsm8k": 0.7},
            reference_ids=reference_ids,
        )
        stop.start("gsm8k", 24)
        for position in range(8):
            stop.observe("gsm8k", position, 0.0, collapsed, None, position)
        stop.after_batch("gsm8k")
        return stop.tasks["gsm8k"].stopped

    assert stopped({}) is None  # the greedy entry does not apply at T = 0.7
    assert stopped({"gsm8k": sampled})["gate"] == "acceptance"
