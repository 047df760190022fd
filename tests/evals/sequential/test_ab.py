"""The sequential A/B controller (evals/sequential/ab_watch.py): pairs two sides' progress along the seeded order, feeds
the discordant pairs to the SPRT, and stops both sides when it decides."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from specdec_eval.evals.sequential.ab_watch import DocumentProgress, SideProgress, discordant_in_order, watch
from specdec_eval.evals.sequential.discordant_pairs import PairedSequentialDesign


def _write(side: SideProgress, scores: list[float], task: str = "gsm8k", start: int = 0) -> None:
    with side.progress_file.open("a") as f:
        for i, s in enumerate(scores, start):
            f.write(json.dumps({"task": task, "position": i, "score": s}) + "\n")


def _write_samples(side: SideProgress, documents: list[list[float]], task: str = "gsm8k") -> None:
    """Each document's samples as a side with --repeats reports them: one record per sample, with its repeat."""
    with side.progress_file.open("a") as f:
        for position, scores in enumerate(documents):
            for repeat, score in enumerate(scores):
                f.write(
                    json.dumps(
                        {
                            "task": task,
                            "position": position,
                            "repeat": repeat,
                            "repeats": len(scores),
                            "score": score,
                            "of": len(documents),
                        }
                    )
                    + "\n"
                )


def _docs(scores: dict[tuple[str, int], float]) -> dict[tuple[str, int], DocumentProgress]:
    return {key: DocumentProgress((score,)) for key, score in scores.items()}


def test_discordant_pairs_follow_the_common_prefix_of_the_order():
    a = _docs({("t", 0): 100.0, ("t", 1): 0.0, ("t", 2): 50.0, ("t", 4): 0.0})
    b = _docs({("t", 0): 0.0, ("t", 1): 0.0, ("t", 2): 100.0, ("t", 3): 0.0, ("t", 4): 100.0})
    assert discordant_in_order(a, b) == [False, True]  # position 3 is missing on A: the prefix ends there


def test_documents_with_several_samples_are_compared_by_their_means():
    """--repeats 2: a document whose samples swap between the sides is no pair at all (sample by sample it would be
    two discordant pairs, one each way); a document counts once, by its mean."""
    a = {
        ("t", 0): DocumentProgress((100.0, 0.0)),
        ("t", 1): DocumentProgress((100.0, 100.0)),
        ("t", 2): DocumentProgress((0.0, 0.0)),
        ("t", 3): DocumentProgress((100.0, 0.0)),
    }
    b = {
        ("t", 0): DocumentProgress((0.0, 100.0)),
        ("t", 1): DocumentProgress((0.0, 100.0)),
        ("t", 2): DocumentProgress((100.0, 100.0)),
        ("t", 3): DocumentProgress((100.0, 0.0)),
    }
    assert discordant_in_order(a, b) == [False, True]


def test_a_document_is_paired_only_once_both_sides_have_all_its_samples(tmp_path):
    sides = {n: SideProgress(tmp_path / f"side-{n}.stop") for n in "AB"}
    _write_samples(sides["A"], [[100.0, 100.0], [100.0, 100.0], [100.0, 100.0]])
    _write_samples(sides["B"], [[0.0, 0.0], [0.0, 0.0]])
    with sides["B"].progress_file.open("a") as f:  # B's third document: one of its two samples so far
        f.write(json.dumps({"task": "gsm8k", "position": 2, "repeat": 0, "repeats": 2, "score": 0.0}) + "\n")
    docs_a, docs_b = sides["A"].documents(), sides["B"].documents()
    assert sorted(docs_a) == [("gsm8k", 0), ("gsm8k", 1), ("gsm8k", 2)]
    assert sorted(docs_b) == [("gsm8k", 0), ("gsm8k", 1)]
    assert docs_a[("gsm8k", 0)] == DocumentProgress((100.0, 100.0), None, 3)
    assert discordant_in_order(docs_a, docs_b) == [False, False]  # the third document waits for B's second sample


def test_a_worse_b_with_several_samples_per_document_is_decided_on_documents(tmp_path):
    """40 documents of 4 samples, B right on half as many samples of each: 40 discordant documents, not 160
    discordant samples; the SPRT decides B-WORSE on the documents."""
    sides = {n: SideProgress(tmp_path / f"side-{n}.stop") for n in "AB"}
    _write_samples(sides["A"], [[100.0, 100.0, 100.0, 0.0] for _ in range(40)])
    _write_samples(sides["B"], [[100.0, 0.0, 0.0, 0.0] for _ in range(40)])
    record = watch(sides, PairedSequentialDesign(), lambda: True, poll_s=0)
    assert record["verdict"] == "B-WORSE" and record["stopped_sides"]
    assert record["discordant_pairs"] <= record["pairs_seen"] == 40


def test_a_clearly_worse_b_is_decided_and_both_sides_are_told_to_stop(tmp_path):
    sides = {n: SideProgress(tmp_path / f"side-{n}.stop") for n in "AB"}
    _write(sides["A"], [100.0] * 40)
    _write(sides["B"], [0.0] * 40)
    record = watch(sides, PairedSequentialDesign(), lambda: True, poll_s=0)
    assert record["verdict"] == "B-WORSE" and record["stopped_sides"]
    assert all(s.stop_file.exists() and "B-WORSE" in s.stop_file.read_text() for s in sides.values())
    assert record["discordant_pairs"] < 40


def test_sides_that_end_undecided_get_the_final_verdict(tmp_path):
    sides = {n: SideProgress(tmp_path / f"side-{n}.stop") for n in "AB"}
    _write(sides["A"], [100.0, 0.0, 100.0])
    _write(sides["B"], [0.0, 100.0, 100.0])
    record = watch(sides, PairedSequentialDesign(), lambda: False, poll_s=0)
    assert record["verdict"] == "NO-DIFFERENCE" and not record["stopped_sides"]
    assert not any(s.stop_file.exists() for s in sides.values())


@pytest.mark.slow
def test_ab_early_stop_end_to_end_on_one_commit(tmp_path):
    """Two sides of the same commit never disagree: the controller lets them finish and reports no difference."""
    repo = tmp_path / "repo"
    subprocess.run(
        ["git", "clone", "-q", str(__import__("pathlib").Path(__file__).resolve().parents[3]), str(repo)], check=True
    )
    cmd = [
        sys.executable,
        "-m",
        "specdec_eval.cli.main",
        "ab",
        "HEAD",
        "HEAD",
        "--repo",
        str(repo),
        "--early-stop",
        "--early-stop-batch",
        "2",
        "--out",
        str(tmp_path / "runs"),
        "--",
        "--model",
        "tiny",
        "--tasks",
        "gsm8k_smoke",
        "--limit",
        "4",
        "--max-output-len",
        "8",
        "--no-reference",
        "--device-memory",
        "256MiB",
    ]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "sequential A/B: NO-DIFFERENCE after 0 discordant pairs (both sides ran to the end)" in p.stdout


@pytest.mark.slow
def test_ab_early_stop_decides_on_acceptance_end_to_end(tmp_path):
    """`ab --early-stop --decide-on acceptance` from the CLI: two sides of one commit draft the same documents with
    the same counts, so the paired acceptance test rules a 5 % drop out at its first look and stops both sides (the
    SPRT alone, with no discordant pair, would have let them run to the end)."""
    result = _ab_on_one_commit_deciding_on_acceptance(tmp_path)
    sequential = result["sequential"]
    assert sequential["decide_on"] == "acceptance" and sequential["stopped_sides"], sequential
    assert sequential["acceptance"]["verdict"] == "NO-DROP", sequential["acceptance"]
    (looked,) = sequential["acceptance"]["tasks"].values()
    assert looked["n"] == 2  # decided at the first look; how far the sides ran on after the stop is a race
    (compared,) = result["tasks"].values()
    assert 2 <= compared["n"] <= 8
    assert compared["acceptance"]["per_document"]["relative"] == 0.0 and not result["acceptance_drops"]


@pytest.mark.slow
def test_ab_early_stop_with_repeats_end_to_end(tmp_path):
    """`ab --early-stop` at T = 1.0 with --repeats 2 on one commit: both sides draw each (document, repeat) from the
    same seed, so their samples agree, no document is discordant, and the per-document acceptance (summed over a
    document's two samples) rules a 5 % drop out at the first look of 2 documents and stops both sides; the runs
    hold whole documents, each sample with its repeat, and `compare` tests them clustered by document."""
    result = _ab_on_one_commit_deciding_on_acceptance(tmp_path, "--gen-kwargs", "temperature=1.0", "--repeats", "2")
    sequential = result["sequential"]
    assert sequential["stopped_sides"] and sequential["acceptance"]["verdict"] == "NO-DROP", sequential
    (looked,) = sequential["acceptance"]["tasks"].values()
    assert sequential["discordant_pairs"] == 0 and looked["n"] == 2
    (compared,) = result["tasks"].values()
    # whole documents of 2 samples (how far the sides ran on after the stop is a race: not asserted)
    assert 4 <= compared["n"] <= 16 and compared["n"] % 2 == 0
    assert compared["clustered"]["samples_per_document"] == 2 and compared["verdict"] == "no significant change"


def _ab_on_one_commit_deciding_on_acceptance(tmp_path, *run_args: str) -> dict:
    """`ab HEAD HEAD --early-stop --decide-on acceptance --json` on a clone of this checkout (tiny, 8 smoke
    documents, batches of 2), `run_args` added to each side's run; its JSON result (the command must exit 0)."""
    repo = tmp_path / "repo"
    subprocess.run(
        ["git", "clone", "-q", str(__import__("pathlib").Path(__file__).resolve().parents[3]), str(repo)], check=True
    )
    cmd = [
        sys.executable,
        "-m",
        "specdec_eval.cli.main",
        "ab",
        "HEAD",
        "HEAD",
        "--repo",
        str(repo),
        "--early-stop",
        "--decide-on",
        "acceptance",
        "--early-stop-batch",
        "2",
        "--out",
        str(tmp_path / "runs"),
        "--json",
        "--",
        "--model",
        "tiny",
        "--spec",
        "eagle3",
        "--tasks",
        "gsm8k_smoke",
        "--limit",
        "8",
        "--max-output-len",
        "8",
        *run_args,
        "--no-reference",
        "--device-memory",
        "256MiB",
    ]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout)
