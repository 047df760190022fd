"""`--populate-acceptance` writes a reference only from a clean, passing run and says how
many documents it rests on; its file is checked before anything runs; two processes populating one file both land.
(A FAILed run with an injected fault once overwrote the shipped SmolLM2 reference: 1.9990 -> 2.1304.)"""

from __future__ import annotations

import errno
import multiprocessing
import os
from types import SimpleNamespace

import pytest
from specdec_eval.cli.run_report import populated_line
from specdec_eval.evals.gates import acceptance_file
from specdec_eval.evals.gates.acceptance_file import (
    check_writable,
    load_acceptance_references,
    populate,
    populate_from_run,
    populate_refusal,
)

from specdec_eval.errors import UserError

from ...cli_helpers import run_cli

TEST = "accuracy/test_specdec.py::TestSmolLM2_135M::test_eagle3[v2_kv_cache-one_model-tp1]"
SHIPPED = f"{TEST}:\n  ref_al: 1.999\n  min_al: 1.89905\n"
SMOKE = [
    "--model",
    "tiny",
    "--device",
    "cpu",
    "--device-memory",
    "256MiB",
    "--tasks",
    "gsm8k_smoke",
    "--no-reference",
    "--limit",
    "1",
    "--max-output-len",
    "4",
    "--spec",
    "eagle3",
]


def _clean_summary(**changes) -> dict:
    task = {"verdict": "REPORT", "num_failed_requests": 0, "lossless": {"verdict": "PASS"}}
    return {
        "verdict": "PASS",
        "tasks": {"gsm8k": {**task, **changes.pop("task", {})}},
        "events": {},
        "failing_events": 0,
        **changes,
    }


def _result(documents: int = 100, cycles: int = 1000, accepted: int = 1130) -> SimpleNamespace:
    counts = {"num_cycles": cycles, "num_accepted_drafts": accepted, "accepted_per_position": [600, 330, 200]}
    return SimpleNamespace(task="gsm8k", family="gsm8k", num_samples=documents, acceptance=counts)


@pytest.mark.parametrize(
    "changes, words",
    [
        ({"task": {"lossless": {"verdict": "FAIL"}}, "verdict": "FAIL"}, "the lossless gate FAILed on gsm8k"),
        ({"task": {"verdict": "FAIL"}, "verdict": "FAIL"}, "the accuracy gate FAILed on gsm8k"),
        ({"events": {"fault_injected": 2}}, "faults were injected"),
        ({"faults_never_fired": ["target_forward@99"]}, "faults were injected"),
        ({"failing_events": 1, "verdict": "FAIL"}, "1 failing event(s)"),
        ({"task": {"num_failed_requests": 3}}, "3 failed request(s)"),
    ],
)
def test_a_tainted_run_never_becomes_a_reference(tmp_path, changes, words):
    path = tmp_path / "acceptance_length.yaml"
    path.write_text(SHIPPED)
    summary = _clean_summary(**changes)
    assert words in populate_refusal(summary)
    record = populate_from_run(summary, [_result()], TEST, path)
    assert path.read_text() == SHIPPED  # not one byte changed
    assert record["refused"].startswith("not a clean, passing run: ") and words in record["refused"]
    assert record["changed"] is False


def test_a_clean_run_writes_and_says_what_it_rests_on(tmp_path):
    path = tmp_path / "acceptance_length.yaml"
    path.write_text(SHIPPED)
    assert populate_refusal(_clean_summary()) is None
    record = populate_from_run(_clean_summary(), [_result(documents=100, cycles=1000)], TEST, path)
    assert record["changed"] and "refused" not in record
    assert (record["num_documents"], record["num_cycles"], record["task"]) == (100, 1000, "gsm8k")
    assert load_acceptance_references(path)[TEST]["ref_al"] == pytest.approx(2.13)
    nothing_drafted = populate_from_run(_clean_summary(), [_result(cycles=0, accepted=0)], TEST, path)
    assert nothing_drafted["refused"] == "the run drafted nothing (no draft cycles)"


def test_impossible_counts_never_become_a_reference(tmp_path):
    path = tmp_path / "acceptance_length.yaml"
    path.write_text(SHIPPED)
    result = _result(cycles=1, accepted=50)
    result.acceptance.update(num_draft_tokens=3, accepted_per_position=[], max_draft_len=3)
    record = populate_from_run(_clean_summary(), [result], TEST, path)
    assert record["refused"] == (
        "not a clean, passing run: impossible acceptance counts (50 accepted drafts of 3 drafted)"
    )
    assert path.read_text() == SHIPPED and record["changed"] is False


def test_a_run_that_measured_no_acceptance_says_so(tmp_path):
    """A server whose answers carried impossible acceptance counts had each answer refused, so no task measured an
    acceptance length: --populate-acceptance wrote nothing and said nothing. It says why now (and the run exits 1)."""
    path = tmp_path / "acceptance_length.yaml"
    path.write_text(SHIPPED)
    failed = _clean_summary(task={"num_failed_requests": 4})
    record = populate_from_run(failed, [SimpleNamespace(**{**vars(_result()), "acceptance": None})], TEST, path)
    assert record["refused"] == (
        "no task measured an acceptance length (not a clean, passing run: 4 failed request(s))"
    )
    assert path.read_text() == SHIPPED and record["changed"] is False
    assert populated_line(record) == f"acceptance reference NOT written ({TEST}): {record['refused']}"


def test_a_sampled_run_writes_its_own_decodings_entry_and_leaves_the_greedy_one(tmp_path):
    """A sampled run's reference goes under its decoding's key and states that decoding, so a greedy run never reads
    it and the greedy entry keeps every byte; the gate then judges the next run of that decoding against it."""
    from specdec_eval.evals.gates.acceptance_gate import evaluate_acceptance

    path = tmp_path / "acceptance_length.yaml"
    path.write_text(SHIPPED)
    result = _result(cycles=1000, accepted=985)
    result.conditions = {"temperature": 0.7, "top_k": 20, "top_p": 0.9}
    record = populate_from_run(_clean_summary(), [result], TEST, path, "rejection")
    key = f"{TEST}::sampled[temperature=0.7,top_k=20,top_p=0.9,rejection]"
    assert record["changed"] and record["test_id"] == key
    assert path.read_text().startswith(SHIPPED)  # the greedy entry untouched
    refs = load_acceptance_references(path)
    assert refs[TEST] == {"ref_al": 1.999, "min_al": 1.89905}
    assert refs[key]["ref_al"] == pytest.approx(1.985) and refs[key]["temperature"] == 0.7
    assert (refs[key]["top_k"], refs[key]["top_p"], refs[key]["spec_sampling"]) == (20, 0.9, "rejection")
    assert populate_from_run(_clean_summary(), [result], TEST, path, "rejection")["changed"] is False  # idempotent
    collapsed = _result(documents=100, cycles=1000, accepted=573)  # the planted restart_stream run's AL 1.573
    collapsed.conditions, collapsed.acceptance_requests, collapsed.acceptance_positions = result.conditions, [], []
    gate = evaluate_acceptance([collapsed], TEST, refs, 0.05, "rejection")["gsm8k"]
    assert gate.verdict == "FAIL" and "collapse tripwire" in gate.reason
    assert evaluate_acceptance([collapsed], TEST, refs, 0.05, "coupled")["gsm8k"].verdict == "NO-REFERENCE"
    greedy = _result(cycles=1000, accepted=999)
    greedy.conditions, greedy.acceptance_requests, greedy.acceptance_positions = {"temperature": 0.0}, [], []
    assert evaluate_acceptance([greedy], TEST, refs, 0.05)["gsm8k"].verdict == "PASS"  # against 1.999, not 1.985


def test_run_refuses_populate_with_inject_before_anything_runs(tmp_path, capsys):
    refs = tmp_path / "refs.yaml"
    refs.write_text(SHIPPED)
    code, _, err = run_cli(
        capsys,
        "run",
        *SMOKE,
        "--inject",
        "emit_rejected_draft",
        "--populate-acceptance",
        "--acceptance-refs",
        str(refs),
        "--out",
        str(tmp_path / "runs"),
    )
    assert code == 2 and "leave out --inject" in err and len(err.strip().splitlines()) == 1
    assert refs.read_text() == SHIPPED and not (tmp_path / "runs").exists()
    code, _, err = run_cli(
        capsys,
        "run",
        *SMOKE[:-2],
        "--populate-acceptance",
        "--acceptance-refs",
        str(refs),
        "--out",
        str(tmp_path / "runs"),
    )
    assert code == 2 and "needs --spec" in err and not (tmp_path / "runs").exists()


def test_acceptance_refs_a_folder_or_unwritable_is_one_line(tmp_path, capsys, monkeypatch):
    code, _, err = run_cli(capsys, "run", *SMOKE, "--acceptance-refs", str(tmp_path), "--out", str(tmp_path / "r"))
    assert code == 2 and err.strip() == f"specdec-eval: error: {tmp_path}: is a folder, not a references file"
    with pytest.raises(UserError, match="is a folder"):
        check_writable(tmp_path)
    target = tmp_path / "refs.yaml"
    real_access = os.access
    monkeypatch.setattr(
        acceptance_file.os, "access", lambda p, mode: False if str(p) == str(tmp_path) else real_access(p, mode)
    )  # a read-only mount, as root sees one too
    with pytest.raises(UserError, match="not writable"):
        check_writable(target)
    monkeypatch.undo()

    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(acceptance_file, "atomic_write", read_only)  # it went read-only after the check
    with pytest.raises(UserError, match="cannot write the acceptance references .*Read-only file system"):
        populate(target, TEST, 2.0)


def _populate_many(path: str, prefix: str, n: int) -> None:
    for i in range(n):
        populate(path, f"{prefix}::test_{i}", 1.5 + i / 100)


def test_two_processes_populating_one_file_keep_every_entry(tmp_path):
    """Each populate reads, edits and writes the whole file; without the lock, one process's write replaced the
    other's entries (30 of 60 survived)."""
    path = tmp_path / "acceptance_length.yaml"
    path.write_text(SHIPPED)
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_populate_many, args=(str(path), name, 30)) for name in ("a", "b")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0]
    refs = load_acceptance_references(path)
    assert len(refs) == 61 and refs[TEST]["ref_al"] == 1.999
