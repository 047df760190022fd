"""The report states every band exactly as the gate computed it (sampling slack included), read from the
summary the gate wrote; and a run whose gates could not fail is NO-GATE in the report, the runs table, `decide`
and the run's own last line, never PASS."""

from __future__ import annotations

import pytest
from specdec_eval.evals.gates.acceptance import acceptance_gate
from specdec_eval.results.report.data import load_run
from specdec_eval.results.report.gates import acceptance_gate as gate_text
from specdec_eval.results.report.gates import decide_run
from specdec_eval.results.shown_verdict import run_verdict

from ..cli_helpers import run_cli
from .test_runs_table import TEST, make_run

PLAIN = "accuracy/test_specdec.py::TestSmolLM2_135M::test_auto_dtype[v2_kv_cache-tp1]"
STATS = {"num_cycles": 1000, "num_accepted_drafts": 1137, "accepted_per_position": [], "max_draft_len": 3}
REFS = {TEST: {"ref_al": 1.999, "min_al": 1.899, "max_draft_len": 3}}


def test_the_report_states_the_band_the_gate_used():
    """`make run` printed "PASS (AL 2.137 within ref_al 1.999 +- 14%)" and the report "AL 2.14 within [1.90, 2.10]
    (ref 2.00 +- 5%)": the report had dropped the sampling slack. Now both come from the gate's own band."""
    gate = acceptance_gate(TEST, STATS, REFS, 0.05, slack=0.28)
    assert gate["verdict"] == "PASS" and gate["band"]["tolerance"] == pytest.approx(0.28 / 1.999)
    low, high = gate["band"]["low"], gate["band"]["high"]
    assert low < 2.137 < high and f"within [{low:.3f}, {high:.3f}] (ref_al 1.999 +- 14%" in gate["reason"]
    text = gate_text({"acceptance_gate": gate}).text
    # a band wider than min_al is said (it cannot rule out a drop to min_al), and so is the gate's power
    assert text.startswith(
        f"PASS (band wider than min_al: does not rule out a drop to min_al): AL 2.137 within "
        f"[{low:.3f}, {high:.3f}] (ref 1.999 ± 14%, rtol 5% widened by sampling slack 0.280, min "
        "1.899 - slack); power: at this run it detects a drop of "
    )
    # a summary whose gate recorded no band nor power (written before it did): neither is invented for it
    old = {k: v for k, v in gate.items() if k not in ("band", "power")}
    assert gate_text({"acceptance_gate": old}).text == (
        "PASS: AL 2.137 (ref 1.999; this summary does not record its gate's band)"
    )
    failing = acceptance_gate(TEST, STATS, REFS, 0.05)  # no slack: +-5% and 2.137 is outside
    assert failing["verdict"] == "FAIL" and gate_text({"acceptance_gate": failing}).text.startswith(
        f"FAIL: AL 2.137 outside [{failing['band']['low']:.3f}, {failing['band']['high']:.3f}] (ref 1.999 ± 5%"
    )


def _plain_run(root, n):
    """A non-speculative run without an accuracy reference: no gate could fail it, its summary says PASS."""
    return make_run(
        root,
        n,
        test_id=PLAIN,
        tasks={"gsm8k": {"score": 41.0, "reference": None, "threshold": None, "verdict": "REPORT"}},
    )


def test_a_run_no_gate_could_fail_is_no_gate_everywhere(tmp_path, capsys):
    root = tmp_path / "runs"
    run = _plain_run(root, 1)
    assert run.summary()["verdict"] == "PASS" and run_verdict(run.summary()) == "NO-GATE"
    assert decide_run(load_run(1, run)).sentence == "NO-GATE (no gate could fail; no accuracy reference)"
    code, out, _ = run_cli(capsys, "runs", "--out", str(root))
    row = next(line for line in out.splitlines() if line.startswith(run.run_id))
    assert code == 0 and row.split()[-2:] == ["NO-GATE", "0"]
    code, out, _ = run_cli(capsys, "decide", PLAIN, "--out", str(root), "--waives", str(tmp_path / "w.txt"))
    assert code == 0 and out.splitlines()[1] == (
        f"reason: the newest run {run.run_id} is NO-GATE (no gate could fail it) and the test is not waived"
    )
    assert "NO-GATE" in out.splitlines()[-1] and " PASS " not in out
    gated = make_run(root, 2)  # a run whose accuracy gate could fail, and passed
    assert run_verdict(gated.summary()) == "PASS"


def test_decide_lifts_no_waive_on_runs_no_gate_could_fail(tmp_path):
    from specdec_eval.results.decide import decide

    waives = tmp_path / "waives.txt"
    waives.write_text(f"{PLAIN} SKIP (https://nvbugs/1)\n")
    for n in (1, 2, 3):
        _plain_run(tmp_path / "runs", n)
    d = decide(PLAIN, None, tmp_path / "runs", waives)
    assert d.action == "keep" and d.reason == (
        "only 0 of 3 required passing runs on any GPU (3 NO-GATE run(s) left out: no gate could fail them)"
    )
    for n in (4, 5, 6):
        make_run(tmp_path / "runs", n, test_id=PLAIN)
    d = decide(PLAIN, None, tmp_path / "runs", waives)
    assert d.action == "unwaive" and "3 NO-GATE run(s) left out" in d.reason


def test_the_run_itself_says_no_gate(capsys):
    from specdec_eval.cli.run_report import print_report

    task = {
        "num_samples": 2,
        "data": "smoke",
        "report": "r",
        "filter_scores": {"strict-match": 0.0},
        "score": 0.0,
        "reference": None,
        "threshold": None,
        "theta": None,
        "verdict": "REPORT",
        "acceptance": None,
    }
    print_report({"tasks": {"gsm8k_smoke": task}, "verdict": "PASS", "events": {}, "elapsed_s": 3, "world_size": 1})
    assert (
        capsys.readouterr().out.rstrip().splitlines()[-1] == "run NO-GATE (no gate could fail this run) in 3 s "
        "(1 rank(s))"
    )
