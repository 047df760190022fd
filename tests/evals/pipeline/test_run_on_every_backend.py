"""What a run does is the same on every backend: the places where the three copies of the baseline and control
policy (local, torchrun, endpoint) had drifted apart before the run pipeline had one (evals/pipeline/run.py):

- a torchrun run (`run --gpus 2 --dtype bfloat16 --spec eagle3`) never decoded the noise-floor control a local run
  decodes, and labelled the baseline job it had just run a recorded plain run;
- an endpoint run checked `--baseline RUN` only after evaluating the whole server (a local run refuses it before
  decoding anything), and with `--baseline-endpoint` too it dropped the named run without a word.

Each test goes through the command line and the store only, so it reads the same on the code before the one
policy, where it fails."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from specdec_eval.results import store

from ...cli_helpers import run_cli

ARGS = ("run", "--model", "tiny", "--tasks", "gsm8k_smoke", "--no-reference", "--json", "--device", "cpu")


def test_a_torchrun_run_decodes_the_control_a_local_run_decodes(capsys, monkeypatch, tmp_path):
    """`run --gpus 2 --dtype bfloat16 --spec eagle3` judged bf16 without the noise-floor control that the same
    command makes on one rank; and the baseline job it ran first was labelled a recorded run. Every job the launcher
    would start is recorded here instead of started."""
    import specdec_eval.launch.job as job_module

    jobs = []

    def fake_launch(job, spec, layout, device, dry_run):
        jobs.append(job)
        folder = tmp_path / f"job{len(jobs)}"
        return {"verdict": "PASS", "tasks": {}, "events": {}, "failing_events": 0, "run_dir": str(folder)}

    monkeypatch.setattr(job_module, "launch", fake_launch)
    code, out, err = run_cli(
        capsys, *ARGS, "--out", str(tmp_path / "runs"), "--gpus", "2", "--dtype", "bfloat16", "--spec", "eagle3"
    )
    assert code == 0, err
    shapes = [(j.engine.spec is not None, j.engine.max_batch_size) for j in jobs]
    assert shapes == [(False, 1), (False, 64), (True, 64)]  # the control, the baseline, the run
    run_payload = jobs[-1].payload
    assert run_payload["baseline"]["kind"] == "separate" and run_payload["baseline"]["run"] == str(tmp_path / "job2")
    assert run_payload["baseline"]["control"] == str(tmp_path / "job1")


def _speculative_run(root: Path) -> store.Run:
    """A finished spec-dec run: no lossless verdict may rest on it."""
    run = store.new_run(root, "abc123")
    with run:
        config = {"engine": {"model": "tiny", "spec": {"algorithm": "eagle3"}}, "eval": {"tasks": ["gsm8k_smoke"]}}
        run.write_manifest(
            {
                "run_id": run.run_id,
                "config": config,
                "finished": time.time(),
                "engine": {"kind": "local", "model": "tiny", "resolved_dtype": "float32"},
            }
        )
        run.write_summary(
            {
                "verdict": "PASS",
                "tasks": {"gsm8k_smoke": {"num_samples": 4, "verdict": "REPORT"}},
                "events": {},
                "spec": "eagle3",
                "failing_events": 0,
            }
        )
    return run


def test_an_endpoint_runs_named_baseline_is_checked_before_anything_is_asked_of_the_server(capsys, tmp_path):
    """A local run refuses a `--baseline RUN` no verdict may rest on before decoding anything; an endpoint run
    evaluated the whole server first. Port 9 answers nothing: the refusal must come before any request."""
    runs = tmp_path / "runs"
    named = _speculative_run(runs)
    before = sorted(p.name for p in runs.iterdir())
    code, out, err = run_cli(
        capsys,
        *ARGS,
        "--out",
        str(runs),
        "--endpoint",
        "http://127.0.0.1:9",
        "--spec",
        "eagle3",
        "--draft-len",
        "3",
        "--baseline",
        named.run_id,
    )
    assert code == 2
    assert f"--baseline: run {named.run_id} is speculative" in err and len(err.strip().splitlines()) == 1
    assert sorted(p.name for p in runs.iterdir()) == before  # no run folder made


def test_an_endpoint_run_refuses_two_baselines(capsys, tmp_path):
    """`--baseline RUN` with `--baseline-endpoint`: the endpoint path evaluated the server and silently dropped the
    named run; a local run never decodes a baseline when one is named."""
    named = _speculative_run(tmp_path / "runs")
    code, out, err = run_cli(
        capsys,
        *ARGS,
        "--out",
        str(tmp_path / "runs"),
        "--endpoint",
        "http://127.0.0.1:9",
        "--baseline-endpoint",
        "http://127.0.0.1:8",
        "--spec",
        "eagle3",
        "--draft-len",
        "3",
        "--baseline",
        named.run_id,
    )
    assert code == 2 and "both name the lossless gate's baseline" in err


@pytest.mark.slow
def test_a_torchrun_run_in_bf16_is_judged_against_its_control_and_names_its_separate_baseline(capsys, tmp_path):
    """The same on real ranks (tiny, two CPU ranks over gloo): the lossless gate measured its noise floor on the
    control job, and names the baseline job this command ran as the separate plain run it is."""
    code, out, err = run_cli(
        capsys,
        *ARGS,
        "--out",
        str(tmp_path),
        "--gpus",
        "2",
        "--dtype",
        "bfloat16",
        "--spec",
        "eagle3",
        "--limit",
        "2",
        "--num-fewshot",
        "0",
        "--max-output-len",
        "8",
    )
    assert code == 0, err
    summary = json.loads(out)
    lossless = summary["tasks"]["gsm8k_smoke"]["lossless"]
    assert summary["baseline"]["label"] == "separate plain run" and lossless["baseline_kind"] == "separate"
    assert lossless["noise"]["control_run"] is not None
