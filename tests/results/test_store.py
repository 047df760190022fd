"""The run store: atomic files with ordinary permissions, unreadable runs reported (never trusted, never dropped
silently), and one writer per run folder (flock), across threads and processes."""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from specdec_eval.results import claims, store
from specdec_eval.results.claims import RunBusyError
from specdec_eval.results.decide import decide
from specdec_eval.results.runs_table import runs_table
from specdec_eval.results.sample_record import SampleRecord
from specdec_eval.results.store import Run, UnreadableRunError

from specdec_eval.records.atomic import atomic_open, atomic_write

from .test_runs_table import TEST, cli_runner, make_run

KEY = "abc123def456"
PASS = {"gsm8k": {"score": 52.0, "threshold": 40.0, "verdict": "PASS"}}


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# --- atomic files --------------------------------------------------------------------------------------------


def test_run_files_get_the_permissions_of_partial_files_and_the_manifest_is_owner_only(tmp_path):
    run = make_run(
        tmp_path,
        1,
        samples=[{"task": "gsm8k", "doc_id": 0, "correct[flexible-extract]": True}],
        events=[{"ts": 1.0, "rank": 0, "type": "request_retried"}],
    )
    run.partial_dir.mkdir()
    partial = run.partial_dir / "generations.rank0.jsonl"
    with partial.open("a") as f:  # how evals/pipeline/resume.py appends finished generations
        f.write("{}\n")
    expected = partial.stat().st_mode & 0o777
    assert expected == 0o666 & ~_umask()
    for name in ("summary.json", "events.jsonl", "samples.parquet"):
        assert (run.path / name).stat().st_mode & 0o777 == expected, name
    assert (run.path / "manifest.json").stat().st_mode & 0o777 == 0o600  # it holds the command line
    assert not [p.name for p in run.path.iterdir() if p.name.endswith(".tmp")]


def test_atomic_write_keeps_the_old_file_when_writing_fails(tmp_path):
    path = tmp_path / "summary.json"
    atomic_write(path, b"old")
    with pytest.raises(ZeroDivisionError), atomic_open(path) as f:
        f.write(b"new, half")
        raise ZeroDivisionError
    assert path.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["summary.json"]
    atomic_write(path, b"exact", mode=0o600)
    assert path.stat().st_mode & 0o777 == 0o600 and path.read_bytes() == b"exact"


# --- unreadable runs -----------------------------------------------------------------------------------------

BROKEN = {
    "torn manifest": ("manifest.json", b'{"run_id": "x", "conf', "manifest.json: not valid JSON"),
    "manifest list": ("manifest.json", b"[1, 2]", "manifest.json: holds a JSON list, not an object"),
    "manifest bad utf-8": ("manifest.json", b'{"a": "\xff"}', "manifest.json: not UTF-8 text"),
    "empty summary": ("summary.json", b"", "summary.json: empty"),
    "cut-off summary": ("summary.json", b'{"verdict": "FAIL", "tasks": {"gsm8k": {"sco', "summary.json: not valid"),
    "summary without verdict": ("summary.json", b'{"tasks": {}}', "summary.json: no 'verdict'"),
    "summary tasks list": ("summary.json", b'{"verdict": "PASS", "tasks": []}', "summary.json: 'tasks' is not"),
    "summary events list": (
        "summary.json",
        b'{"verdict": "PASS", "tasks": {}, "events": [1]}',
        "summary.json: 'events'",
    ),
}


@pytest.mark.parametrize("case", BROKEN)
def test_an_unreadable_run_is_listed_with_its_reason(tmp_path, case):
    name, content, reason = BROKEN[case]
    good = make_run(tmp_path, 1)
    bad = make_run(tmp_path, 2)
    (bad.path / name).write_bytes(content)
    scan = store.scan_runs(tmp_path)
    assert scan.runs == [good] and store.list_runs(tmp_path) == [good]
    [u] = scan.unreadable
    assert u.path == bad.path and u.reason.startswith(reason), u.reason
    assert "\n" not in u.reason and u.started is not None
    with pytest.raises(UnreadableRunError, match=f"run {bad.run_id} cannot be read: {reason[:12]}"):
        store.open_run(bad.run_id, tmp_path)
    with pytest.raises(UnreadableRunError, match="cannot be read"):
        store.open_run(bad.path)
    table = runs_table(tmp_path)
    assert [r["run_id"] for r in table.rows] == [good.run_id]
    assert [u["run_id"] for u in table.unreadable] == [bad.run_id]


def test_a_run_folder_without_manifest_is_unreadable_unless_it_is_being_created(tmp_path):
    (tmp_path / "20260921-000005-cfg5").mkdir()  # a run id, no manifest, nobody holds it
    (tmp_path / "notes").mkdir()  # not a run: ignored
    (tmp_path / ".hidden").mkdir()
    creating = store.new_run(tmp_path, KEY)  # locked, its manifest not written yet
    scan = store.scan_runs(tmp_path)
    assert scan.runs == [] and [(u.run_id, u.reason) for u in scan.unreadable] == [
        ("20260921-000005-cfg5", "no manifest.json")
    ]
    creating.release()
    assert [u.run_id for u in store.scan_runs(tmp_path).unreadable] == ["20260921-000005-cfg5", creating.run_id]


def test_listing_and_resuming_survive_a_broken_manifest(tmp_path):
    broken = make_run(tmp_path, 1, finished=False)
    (broken.path / "manifest.json").write_text("{torn")
    unfinished = Run(tmp_path / f"20260921-000002-{KEY}")
    unfinished.path.mkdir()
    unfinished.write_manifest({"run_id": unfinished.run_id})
    finished = make_run(tmp_path, 3)
    (tmp_path / f"20260921-000004-{KEY}").mkdir()  # an empty leftover of the same key
    assert store.find_unfinished(tmp_path, KEY) == unfinished
    assert store.find_finished(tmp_path, "cfg3") == finished and store.find_finished(tmp_path, KEY) is None
    claimed = claims.claim_unfinished(tmp_path, KEY)
    assert claimed == unfinished and claimed.lock is not None and claimed.lock.held
    claimed.release()


def test_events_and_samples_that_cannot_be_read_name_the_file(tmp_path):
    run = make_run(tmp_path, 1, samples=[{"task": "gsm8k", "doc_id": 0}])
    (run.path / "events.jsonl").write_text('{"type": "a"}\n{"type": "b", "ts\n')
    with pytest.raises(UnreadableRunError, match=r"events.jsonl: line 2 is not JSON"):
        run.events()
    (run.path / "samples.parquet").write_bytes(b"PAR1 torn")
    with pytest.raises(UnreadableRunError, match=r"samples.parquet: not a readable Parquet file"):
        run.samples()


def test_an_unfinished_run_with_torn_events_is_reported(tmp_path):
    run = make_run(tmp_path, 1, finished=False)
    (run.path / "events.jsonl").write_text('{"type": "x"')
    table = runs_table(tmp_path)
    assert table.rows == [] and "events.jsonl: line 1 is not JSON" in table.unreadable[0]["reason"]


def test_cli_runs_warns_once_per_unreadable_run_and_lists_them_in_json(tmp_path):
    cli = cli_runner()
    make_run(tmp_path, 1)
    torn = make_run(tmp_path, 2)
    (torn.path / "summary.json").write_text('{"verdict": "FA')
    other = make_run(tmp_path, 3, test_id="other/test.py::test_x")
    (other.path / "summary.json").write_text("{")
    result = cli("runs", "--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning: cannot read run ")]
    assert len(warnings) == 2 and str(torn.path) in warnings[0] and "summary.json: not valid JSON" in warnings[0]
    assert len(result.stdout.splitlines()) == 2  # header and the one readable run
    listing = json.loads(cli("runs", "--out", str(tmp_path), "--json", "--test-id", TEST).stdout)
    assert [r["run_id"] for r in listing["runs"]] == ["20260921-000001-cfg1"]
    # the other test's run says what it is in its manifest: filtered out like a readable run would be
    [u] = listing["unreadable"]
    assert (u["run_id"], u["test_id"], u["gpu"], u["started"]) == (torn.run_id, TEST, "H200", "2026-09-21T14:15:20Z")


# --- decide never trusts what it cannot read -----------------------------------------------------------------


@pytest.fixture
def waives(tmp_path):
    path = tmp_path / "waives.txt"
    path.write_text(f"full:H200/{TEST} SKIP (https://nvbugs/2)\n")
    return path


def test_decide_keeps_the_waive_over_a_newer_run_whose_summary_was_cut_off(tmp_path, waives):
    root = tmp_path / "runs"
    for n in (1, 2, 3):
        make_run(root, n, tasks=PASS)
    assert decide(TEST, "H200", root, waives).action == "unwaive"
    cut = make_run(root, 4, tasks={"gsm8k": {"score": 10.0, "threshold": 40.0, "verdict": "FAIL"}})
    text = (cut.path / "summary.json").read_text()
    (cut.path / "summary.json").write_text(text[: len(text) // 2])  # a FAIL run, cut off
    d = decide(TEST, "H200", root, waives)
    assert d.action == "keep", d.reason
    assert f"cannot be read (newest: {cut.run_id}: summary.json: not valid JSON" in d.reason
    assert [u["run_id"] for u in d.unreadable] == [cut.run_id]
    result = cli_runner()("decide", TEST, "--gpu", "H200", "--out", str(root), "--waives", str(waives), "--apply")
    assert (
        result.exit_code == 0 and result.stdout.startswith("KEEP:") and f"cannot read run {cut.path}" in result.stderr
    )
    assert waives.read_text() == f"full:H200/{TEST} SKIP (https://nvbugs/2)\n"


def test_decide_keeps_the_waive_over_a_newer_run_with_a_broken_manifest(tmp_path, waives):
    root = tmp_path / "runs"
    for n in (1, 2, 3):
        make_run(root, n, tasks=PASS)
    broken = make_run(root, 4)
    (broken.path / "manifest.json").write_text('{"test_id": "acc')  # it no longer says which test, or when
    broken = Run(broken.path.rename(root / "20260922-000000-cfg4"))  # its id: started after the passing runs
    d = decide(TEST, "H200", root, waives)
    assert d.action == "keep" and broken.run_id in d.reason


def test_an_unreadable_run_older_than_the_evidence_or_of_another_test_does_not_block(tmp_path, waives):
    root = tmp_path / "runs"
    old = make_run(root, 1)
    (old.path / "summary.json").write_text("{")
    other = make_run(root, 5, test_id="other/test.py::test_x")  # readable manifest: another test
    (other.path / "summary.json").write_text("{")
    for n in (2, 3, 4):
        make_run(root, n, tasks=PASS)
    d = decide(TEST, "H200", root, waives)
    assert d.action == "unwaive", d.reason
    assert [u["run_id"] for u in d.unreadable] == [old.run_id]  # listed, though it changes nothing


def test_a_waive_recommendation_notes_a_newer_unreadable_run(tmp_path, waives):
    root = tmp_path / "runs"
    make_run(root, 1, test_id="t/new.py::test_n", tasks={"gsm8k": {"score": 1.0, "threshold": 40.0, "verdict": "FAIL"}})
    torn = make_run(root, 2, test_id="t/new.py::test_n")
    (torn.path / "summary.json").write_text("")
    d = decide("t/new.py::test_n", "H200", root, waives)
    assert (
        d.action == "waive"
        and f"note: 1 run(s) that may be of this test cannot be read (newest: {torn.run_id}" in d.reason
    )


# --- --out, and --root as its hidden old name ----------------------------------------------------------------


def test_runs_and_decide_take_out_and_still_accept_root(tmp_path, waives):
    cli = cli_runner()
    root = tmp_path / "runs"
    make_run(root, 1, tasks=PASS)
    for flag in ("--out", "--root"):
        assert cli("runs", flag, str(root)).exit_code == 0
        assert cli("decide", TEST, flag, str(root), "--waives", str(waives)).exit_code == 0
    result = cli("runs", "--out", str(root), "--root", str(tmp_path))
    assert result.exit_code == 2 and "old name of --out" in result.stderr
    for command in ("runs", "decide", "compare"):
        text = cli(command, "--help").stdout
        assert "--out" in text and "--root" not in text, command


# --- one writer per run --------------------------------------------------------------------------------------


def test_new_run_is_locked_until_released(tmp_path):
    run = store.new_run(tmp_path, KEY)
    assert run.lock.held and run.is_locked()
    again = Run(run.path)
    assert again.try_lock() is None  # another open of the lock file: excluded like another process
    run.write_manifest({"run_id": run.run_id})
    assert claims.claim_unfinished(tmp_path, KEY) is None
    assert claims.busy_runs(tmp_path, KEY) == [run]
    with pytest.raises(RunBusyError, match=f"run {run.run_id} of this configuration is being written by process "):
        claims.acquire_run(tmp_path, KEY)
    fresh, resumed = claims.acquire_run(tmp_path, KEY, resume=False)  # --fresh: the user asked for a second run
    assert not resumed and fresh != run and fresh.lock.held
    fresh.release()
    run.release()
    assert not run.is_locked()
    with claims.claim_unfinished(tmp_path, KEY) as claimed:  # `fresh` has no manifest yet: not resumable
        assert claimed == run and claimed.is_locked()
    assert not claimed.is_locked()


def test_a_lock_goes_with_its_run_object(tmp_path):
    run = store.new_run(tmp_path, KEY)
    path = run.path
    del run
    gc.collect()
    assert not Run(path).is_locked()


def test_acquire_run_resume_modes(tmp_path):
    with pytest.raises(FileNotFoundError, match="--resume: no unfinished run"):
        claims.acquire_run(tmp_path, KEY, resume=True)
    run, resumed = claims.acquire_run(tmp_path, KEY)
    assert not resumed
    run.write_manifest({"run_id": run.run_id})
    run.release()
    again, resumed = claims.acquire_run(tmp_path, KEY, resume=True)
    assert resumed and again == run
    again.write_summary({"verdict": "PASS", "tasks": {}})
    again.release()
    third, resumed = claims.acquire_run(tmp_path, KEY)  # finished runs are never resumed
    assert not resumed and third != run
    with pytest.raises(ValueError, match="letters and digits"):
        store.new_run(tmp_path, "../x")


def test_threads_racing_for_one_key_get_one_run(tmp_path):
    """Eight acquirers at once, each keeping what it got: one run; the others are told it is busy."""
    results: list[object] = []
    start = threading.Barrier(8)

    def acquire() -> None:
        start.wait()
        try:
            run, _ = claims.acquire_run(tmp_path, KEY)
            run.write_manifest({"run_id": run.run_id})
            results.append(run)
        except RunBusyError as e:
            results.append(e)

    threads = [threading.Thread(target=acquire) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    runs = [r for r in results if isinstance(r, Run)]
    assert len(runs) == 1 and len(results) == 8, results
    assert len([p for p in tmp_path.iterdir() if not p.name.startswith(".")]) == 1


_HOLDER = """
import sys, time
from specdec_eval.results import claims
try:
    run, resumed = claims.acquire_run(sys.argv[1], sys.argv[2])
except claims.RunBusyError:
    print("busy", flush=True)
    sys.exit(0)
run.write_manifest({"run_id": run.run_id})
print(run.run_id, resumed, flush=True)
sys.stdin.read()  # hold the run until the parent closes stdin (or kills us)
"""


def _holder(root: Path, go: Path | None = None) -> subprocess.Popen:
    script = (
        _HOLDER
        if go is None
        else f"import os, time\nwhile not os.path.exists({str(go)!r}): time.sleep(0.005)\n" + _HOLDER
    )
    return subprocess.Popen(
        [sys.executable, "-c", script, str(root), KEY], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )


@pytest.mark.slow
def test_two_processes_one_writer_and_sigkill_frees_the_run(tmp_path):
    first = _holder(tmp_path)
    run_id, resumed = first.stdout.readline().split()
    assert resumed == "False"
    second = _holder(tmp_path)
    assert second.stdout.readline().strip() == "busy"  # the identical command does not repeat the work
    second.wait(timeout=30)
    assert claims.claim_unfinished(tmp_path, KEY) is None
    first.send_signal(signal.SIGKILL)  # killed mid-run: the OS drops its lock
    first.wait(timeout=30)
    third = _holder(tmp_path)
    assert third.stdout.readline().split() == [run_id, "True"]  # resumed by the next command
    third.stdin.close()
    assert third.wait(timeout=30) == 0


@pytest.mark.slow
@pytest.mark.parametrize("existing", [False, True])
def test_two_processes_started_together_do_not_both_run(tmp_path, existing):
    if existing:  # an interrupted run of the key: one resumes it, the other is told it is busy
        old = Run(tmp_path / f"20260921-000001-{KEY}")
        old.path.mkdir()
        old.write_manifest({"run_id": old.run_id})
    go = tmp_path.parent / f"{tmp_path.name}.go"
    procs = [_holder(tmp_path, go) for _ in range(2)]
    time.sleep(0.5)
    go.touch()
    lines = sorted(p.stdout.readline().strip() for p in procs)
    for p in procs:
        p.stdin.close()
        assert p.wait(timeout=30) == 0
    assert lines[1] == "busy", lines
    run_id, resumed = lines[0].split()
    assert resumed == str(existing)
    assert len([p for p in tmp_path.iterdir() if not p.name.startswith(".")]) == 1


def test_samples_of_two_tasks_keep_the_columns_only_the_second_task_has(tmp_path):
    """A GSM8K + GPQA run: the GPQA rows' own columns (sealed_fields, so their token ids are unsealed again) are kept
    though the first row, a GSM8K one, has none of them."""
    run = store.new_run(tmp_path, KEY)
    gsm8k = SampleRecord("gsm8k", 0, output_token_ids=[5, 6, 7])
    gpqa = SampleRecord("gpqa", 0, output_token_ids=[8, 9], sealed_fields=["output_token_ids"], extracted={"f": "B"})
    run.write_samples([gsm8k, gpqa])
    back = run.samples()
    assert back[0].output_token_ids == [5, 6, 7] and back[0].extracted.get("f") is None
    assert back[1].output_token_ids == [8, 9] and back[1].extracted["f"] == "B"
    import pyarrow.parquet as pq

    stored = pq.read_table(run.path / "samples.parquet").to_pylist()[1]["output_token_ids"]
    assert stored.startswith("sealed:")  # and still sealed on disk
