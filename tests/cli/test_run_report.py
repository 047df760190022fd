"""What `run` prints says which gate decided: the acceptance gate per task and in the task's row, a server's own
acceptance figures, a populated reference, and a fault that was asked for but never fired."""

from specdec_eval.cli.run_report import print_report
from specdec_eval.results.shown_verdict import UNDERPOWERED


def _summary(**run) -> dict:
    acceptance = {"acceptance_length": 1.02, "acceptance_rate": 0.007, "per_position_rate": [0.02, 0.0, 0.0]}
    gate = {"verdict": "FAIL", "reason": "acceptance length 1.020 below min_al 1.900"}
    task = {
        "num_samples": 8,
        "data": "smoke:x",
        "report": "Evaluated accuracy: 0.000",
        "filter_scores": {"strict-match": 0.0, "flexible-extract": 0.0},
        "score": 0.0,
        "reference": None,
        "threshold": None,
        "theta": None,
        "verdict": "REPORT",
        "acceptance": acceptance,
        "acceptance_gate": gate,
        "num_failed_requests": 0,
    }
    return {"tasks": {"gsm8k": task}, "events": {}, "verdict": "FAIL", "elapsed_s": 1.0, "world_size": 1, **run}


def test_the_acceptance_gate_is_named_in_the_task_and_its_row(capsys):
    print_report(_summary())
    out = capsys.readouterr().out
    assert "acceptance gate: FAIL (acceptance length 1.020 below min_al 1.900)" in out
    row = next(line for line in out.splitlines() if line.startswith("gsm8k "))
    assert row.endswith("acceptance FAIL")


def test_run_notes_server_acceptance_populated_reference_and_unfired_faults(capsys):
    print_report(
        _summary(
            reported_acceptance={"acceptance_length": 2.5, "source": "vllm at /metrics"},
            acceptance_populated={
                "test_id": "t",
                "ref_al": 2.13661,
                "path": "refs.yaml",
                "changed": True,
                "task": "gsm8k",
                "num_documents": 100,
                "num_cycles": 4321,
            },
            faults_never_fired=["target_forward@100000"],
        )
    )
    out = capsys.readouterr().out
    assert "reported by the engine: acceptance length 2.500 (source: vllm at /metrics)" in out
    assert (
        "acceptance reference written: t ref_al 2.1366 from 100 gsm8k documents (4321 draft cycles) in refs.yaml"
    ) in out
    assert "warning: injected fault target_forward@100000 never fired" in out


def test_nothing_extra_when_the_run_has_no_notes(capsys):
    summary = _summary()
    del summary["tasks"]["gsm8k"]["acceptance_gate"]
    print_report(summary)
    out = capsys.readouterr().out
    assert "acceptance gate" not in out and "reported by the engine" not in out and "warning" not in out


def test_a_pass_within_a_band_wider_than_min_al_says_so_in_every_line(capsys):
    summary = _summary(verdict="PASS")
    summary["tasks"]["gsm8k"]["acceptance_gate"] = {
        "verdict": "PASS",
        "reason": "acceptance length 2.010 within [1.717, 2.281]; power: at 10 documents ...",
        "power": {"mde": 0.16, "band_wider_than_min_al": True, "statement": "at 10 documents ..."},
    }
    summary["tasks"]["gsm8k"]["lossless"] = {"verdict": "PASS", "reason": "identical"}
    print_report(summary)
    out = capsys.readouterr().out
    assert f"acceptance gate: PASS ({UNDERPOWERED}) (acceptance length 2.010 within" in out
    row = next(line for line in out.splitlines() if line.startswith("gsm8k "))
    assert row.endswith(f"acceptance PASS ({UNDERPOWERED})")
    assert f"run PASS (acceptance {UNDERPOWERED} on gsm8k) in 1 s" in out
