"""`decide`: waive / unwaive / keep from recorded runs, and `--apply` editing only the one line concerned."""

from __future__ import annotations

import json

import pytest
from specdec_eval.results.decide import apply_decision, decide
from specdec_eval.results.shown_verdict import UNDERPOWERED

from .test_runs_table import TEST, cli_runner, make_run

OTHER = "accuracy/test_specdec.py::TestSmolLM2_135M::test_auto_dtype[v1_kv_cache-tp1]"
# Mixed line endings and no newline at the end: what --apply does not touch must stay byte for byte.
WAIVES = (
    "# waived tests\r\n"
    "accuracy/test_a.py::test_x SKIP (https://nvbugs/1)\n"
    f"full:H200/{TEST} SKIP (https://nvbugs/2)\n"
    f"full:H100/{TEST} SKIP (https://nvbugs/3)\n"
    "\n"
    "zz/test_last.py::test_z XFAIL (x)"
)
H200_LINE = f"full:H200/{TEST} SKIP (https://nvbugs/2)\n"

PASS = {"gsm8k": {"score": 52.0, "threshold": 40.0, "verdict": "PASS"}}
FAIL = {"gsm8k": {"score": 31.2, "threshold": 40.0, "verdict": "FAIL"}}
NO_GATE = {**PASS, "gpqa_diamond": {"score": 30.0, "threshold": 20.0, "verdict": "NO-GATE"}}


@pytest.fixture
def waives(tmp_path):
    path = tmp_path / "waives.txt"
    path.write_bytes(WAIVES.encode())
    return path


@pytest.fixture
def root(tmp_path):
    return tmp_path / "runs"


def test_three_passing_runs_unwaive_and_apply_removes_only_that_line(root, waives):
    for n in (1, 2, 3):
        make_run(root, n, tasks=PASS)
    make_run(root, 4, gpus=["NVIDIA H100 80GB HBM3"], tasks=FAIL)  # another GPU: ignored
    make_run(root, 5, finished=False)  # unfinished: ignored
    d = decide(TEST, "H200", root, waives)
    assert d.action == "unwaive" and d.currently_waived
    assert d.reason == "the 3 most recent runs on H200 pass"
    assert [e["run_id"][-4:] for e in d.evidence] == ["cfg3", "cfg2", "cfg1"]  # newest first
    assert d.evidence[0]["tasks"]["gsm8k"] == {
        "score": 52.0,
        "threshold": 40.0,
        "verdict": "PASS",
        "lossless": None,
        "acceptance_gate": None,
        "acceptance_underpowered": False,
    }
    assert d.waive_lines == [f"line 3: {H200_LINE.strip()}"]
    assert apply_decision(d, waives) == [f"-{H200_LINE.strip()}"]
    assert waives.read_bytes() == WAIVES.replace(H200_LINE, "").encode()
    assert apply_decision(d, waives) == []  # already applied: nothing to do


def test_two_passing_runs_keep(root, waives):
    make_run(root, 1, tasks=PASS)
    make_run(root, 2, tasks=PASS)
    d = decide(TEST, "H200", root, waives)
    assert (d.action, d.reason) == ("keep", "only 2 of 3 required passing runs on H200")
    assert apply_decision(d, waives) == [] and waives.read_bytes() == WAIVES.encode()
    assert decide(TEST, "H200", root, waives, k=2).action == "unwaive"


def test_an_older_failure_within_k_keeps_the_waive(root, waives):
    make_run(root, 1, tasks=PASS)
    make_run(root, 2, tasks=FAIL)
    make_run(root, 3, tasks=PASS)
    make_run(root, 4, tasks=PASS)
    d = decide(TEST, "H200", root, waives)
    assert d.action == "keep"
    assert d.reason.startswith("only 2 of 3 required passing runs: 20260921-000002-cfg2 fails (gsm8k score 31.20")


def test_newest_fail_not_waived_is_waived_with_its_signature(root, waives):
    make_run(root, 1, test_id=OTHER, tasks=PASS)
    make_run(root, 2, test_id=OTHER, tasks=FAIL)
    d = decide(OTHER, "H200", root, waives)
    assert d.action == "waive" and not d.currently_waived
    assert [e["passes"] for e in d.evidence] == [False, True]  # the newest first, then the runs before it
    assert d.signature == "gsm8k score 31.20 < threshold 40.00"
    assert d.reason == "the newest run 20260921-000002-cfg2 fails: gsm8k score 31.20 < threshold 40.00"
    [line] = apply_decision(d, waives)
    assert line == f"+full:H200/{OTHER} SKIP (specdec-eval decide: gsm8k score 31.20 < threshold 40.00)"
    after = waives.read_bytes().decode()
    assert after.replace(line[1:] + "\n", "", 1) == WAIVES  # one line added, nothing else changed
    assert decide(OTHER, "H200", root, waives).action == "keep"  # now already waived


def test_newest_fail_already_waived_keeps(root, waives):
    make_run(root, 1, tasks=FAIL)
    d = decide(TEST, "H200", root, waives)
    assert d.action == "keep" and d.signature == "gsm8k score 31.20 < threshold 40.00"
    assert "already waived (line 3)" in d.reason


def test_runs_on_another_gpu_are_ignored(root, waives):
    for n in (1, 2, 3):
        make_run(root, n, tasks=PASS)
    make_run(root, 4, gpus=["NVIDIA H100 80GB HBM3"], tasks=FAIL)
    assert decide(TEST, "H200", root, waives).action == "unwaive"
    h100 = decide(TEST, "H100", root, waives)
    assert h100.action == "keep" and [e["gpu"] for e in h100.evidence] == ["H100"]
    assert decide(TEST, "B200", root, waives).reason.startswith("no finished runs of this test on B200")


def test_failing_events_make_a_passing_score_fail(root, waives):
    failed = {"ts": 5.0, "rank": 1, "type": "request_failed", "request_id": 7, "reason": "CUDA error: illegal (#12)"}
    for n in (1, 2):
        make_run(root, n, tasks=PASS)
    make_run(root, 3, tasks=PASS, events=[{"ts": 1.0, "rank": 0, "type": "request_retried"}, failed])
    d = decide(TEST, "H200", root, waives)
    assert d.action == "keep" and d.signature == "request_failed: CUDA error: illegal (#12)"
    assert d.evidence[0]["failing_events"] == {"request_failed": 1} and not d.evidence[0]["passes"]
    d = decide(OTHER, None, root, waives)  # no runs of OTHER yet
    assert d.action == "keep"
    leak = {"ts": 1.0, "rank": 0, "type": "spec_state_leak", "fields": ["hidden"], "detected_at": "step 3 start"}
    make_run(root, 4, test_id=OTHER, tasks=PASS, events=[leak])
    d = decide(OTHER, "H200", root, waives)
    assert d.action == "waive"
    assert d.signature == "spec_state_leak: fields=['hidden'], detected_at=step 3 start"
    [line] = apply_decision(d, waives)  # the signature is made safe for a waive reason
    reason = "specdec-eval decide: spec_state_leak: fields='hidden', detected_at=step 3 start"
    assert line == f"+full:H200/{OTHER} SKIP ({reason})"


def test_lossless_failure_fails_the_run(root, waives):
    lossless = {"verdict": "FAIL", "reason": "3 of 40 outputs differ from the baseline in float32"}
    make_run(root, 1, test_id=OTHER, tasks={"gsm8k": {**PASS["gsm8k"], "lossless": lossless}})
    d = decide(OTHER, "H200", root, waives)
    assert d.action == "waive"
    assert d.signature == "gsm8k lossless FAIL: 3 of 40 outputs differ from the baseline in float32"


def test_no_gate_counts_as_passing_and_is_noted(root, waives):
    for n in (1, 2, 3):
        make_run(root, n, tasks=NO_GATE)
    d = decide(TEST, "H200", root, waives)
    assert d.action == "unwaive"
    assert "gpqa_diamond NO-GATE in 3 of 3 runs: passing, but not gated against the reference" in d.reason


def test_an_acceptance_pass_within_a_band_wider_than_min_al_is_noted(root, waives):
    wide = {"verdict": "PASS", "reason": "within a wide band", "power": {"mde": 0.16, "band_wider_than_min_al": True}}
    for n in (1, 2, 3):
        make_run(root, n, tasks={"gsm8k": {**PASS["gsm8k"], "acceptance_gate": wide if n > 1 else {"verdict": "PASS"}}})
    d = decide(TEST, "H200", root, waives)
    assert d.action == "unwaive" and f"(gsm8k in 2 of 3 runs: acceptance {UNDERPOWERED})" in d.reason
    assert [e["tasks"]["gsm8k"]["acceptance_underpowered"] for e in d.evidence] == [True, True, False]


def test_a_waive_for_every_gpu_is_not_lifted_by_one_gpu(root, waives):
    for n in (1, 2, 3):
        make_run(root, n, tasks=PASS)
    d = decide("accuracy/test_a.py::test_x", "H200", root, waives)
    assert d.action == "keep"  # no runs of that test
    for n in (4, 5, 6):
        make_run(root, n, test_id="accuracy/test_a.py::test_x", tasks=PASS)
    d = decide("accuracy/test_a.py::test_x", "H200", root, waives)
    assert d.action == "keep" and d.currently_waived and "applies to every GPU (line 2)" in d.reason
    d = decide("accuracy/test_a.py::test_x", None, root, waives)  # any GPU: lifts the line without full:
    assert d.action == "unwaive"
    assert apply_decision(d, waives) == ["-accuracy/test_a.py::test_x SKIP (https://nvbugs/1)"]
    assert waives.read_bytes() == WAIVES.replace("accuracy/test_a.py::test_x SKIP (https://nvbugs/1)\n", "").encode()


def test_cli_decide(root, waives):
    cli = cli_runner()
    args = ("--root", str(root), "--waives", str(waives))
    for n in (1, 2, 3):
        make_run(root, n, tasks=PASS)
    result = cli("decide", TEST, "--gpu", "H200", *args)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == f"UNWAIVE: {TEST} on H200" and lines[1] == "reason: the 3 most recent runs on H200 pass"
    assert "20260921-000003-cfg3  0123456789  H200  PASS  gsm8k 52.00/thr 40.00 PASS  no failing events" in lines[4]
    assert waives.read_bytes() == WAIVES.encode()  # no --apply: untouched
    report = json.loads(cli("decide", TEST, "--gpu", "H200", *args, "--json").stdout)
    assert report["action"] == "unwaive" and len(report["evidence"]) == 3 and report["applied"] == []
    result = cli("decide", TEST, "--gpu", "H200", *args, "--apply")
    assert result.exit_code == 0 and f"-{H200_LINE.strip()}" in result.stdout
    assert waives.read_bytes() == WAIVES.replace(H200_LINE, "").encode()
    # a failing run of another test, waived with a bug URL
    make_run(root, 4, test_id=OTHER, tasks=FAIL)
    result = cli("decide", OTHER, "--gpu", "H200", *args, "--apply", "--bug", "https://nvbugs/99", "--json")
    report = json.loads(result.stdout)
    assert report["action"] == "waive" and report["applied"] == [f"+full:H200/{OTHER} SKIP (https://nvbugs/99)"]
    # errors: no run store; a missing waives file is "not waived"
    assert cli("decide", TEST, "--root", str(root / "nope"), "--waives", str(waives)).exit_code == 2
    result = cli("decide", OTHER, "--gpu", "H200", "--root", str(root), "--waives", str(root / "none.txt"))
    assert result.exit_code == 0 and result.stdout.startswith("WAIVE:") and "does not exist" in result.stderr
    assert cli("decide", TEST, *args, "--k", "0").exit_code == 2


def test_unwaive_for_one_gpu_notes_a_remaining_waive_for_every_gpu(root, tmp_path):
    path = tmp_path / "both.txt"
    path.write_bytes(f"{TEST} SKIP (https://nvbugs/8)\nfull:H200/{TEST} SKIP (https://nvbugs/9)\n".encode())
    for n in (1, 2, 3):
        make_run(root, n, tasks=PASS)
    d = decide(TEST, "H200", root, path)
    assert d.action == "unwaive" and d.reason.endswith("; still waived on every GPU by line 1")
    assert apply_decision(d, path) == [f"-full:H200/{TEST} SKIP (https://nvbugs/9)"]
    assert path.read_bytes() == f"{TEST} SKIP (https://nvbugs/8)\n".encode()
