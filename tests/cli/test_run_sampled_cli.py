"""`run --spec-sampling rejection` on a sampled task, from the command line: the run is judged in distribution (the
plain engine scores its outputs by teacher forcing; nothing else is decoded), PASSes as it is, and FAILs with the
rejection sampler made greedy (`--inject rejection_greedy`), the bug the sampled verdict exists for."""

from __future__ import annotations

import json

import pytest

from ..cli_helpers import run_cli
from .test_run_cli import SHARED_DATA, needs_shared_data

RUN = (
    "run",
    "--model",
    "tiny",
    "--device",
    "cpu",
    "--device-memory",
    "256MiB",
    "--spec",
    "eagle3",
    "--spec-sampling",
    "rejection",
    "--tasks",
    "gsm8k_sampled",
    "--data-dir",
    str(SHARED_DATA),
    "--limit",
    "2",
    "--max-output-len",
    "32",
    "--num-fewshot",
    "0",
    "--no-reference",
)


def _lossless(out_dir) -> tuple[list, dict]:
    runs = [p for p in out_dir.iterdir() if (p / "summary.json").is_file()]
    (summary,) = [json.loads((p / "summary.json").read_text()) for p in runs]
    return runs, summary["tasks"]["gsm8k_sampled"]["lossless"]


@pytest.mark.slow
@needs_shared_data
def test_a_rejection_sampled_run_is_judged_in_distribution_and_a_greedy_sampler_fails(capsys, tmp_path):
    code, out, err = run_cli(capsys, *RUN, "--out", str(tmp_path / "clean"))
    assert code == 0, err
    assert "lossless gate: sampled tasks judged in distribution" in err
    assert "lossless: PASS (sampled: 64 positions (exact), PIT uniformity p = " in out
    runs, gate = _lossless(tmp_path / "clean")
    assert len(runs) == 1  # no baseline and no control were decoded: the plain engine only scored
    assert gate["baseline_kind"] == "scored" and gate["basis"] == "exact" and gate["positions"] == 64
    assert sum(gate["pit_histogram"]) == 64 and gate["target"]["num_beyond"] == 0

    code, out, err = run_cli(capsys, *RUN, "--inject", "rejection_greedy", "--out", str(tmp_path / "greedy"))
    assert code == 1, err
    assert "lossless: FAIL (sampled: 64 positions" in out
    assert "the emitted tokens are not draws from the target's sampling distribution" in out
    _, gate = _lossless(tmp_path / "greedy")
    assert gate["verdict"] == "FAIL" and gate["pit"]["p"] <= 1 / 20_001  # 64 positions: the Monte Carlo p, at its floor


COUPLED = tuple(a for a in RUN if a not in ("--spec-sampling", "rejection"))


@pytest.mark.slow
@needs_shared_data
def test_a_coupled_sampled_run_is_judged_token_for_token_and_in_distribution(capsys, tmp_path, monkeypatch):
    """Our default sampler at T > 0: the paired twins give identity, an independent plain engine's scoring gives the
    distribution; a sampler that draws from the wrong distribution on both sides alike (identity holds) FAILs."""
    code, out, err = run_cli(capsys, *COUPLED, "--out", str(tmp_path / "clean"))
    assert code == 0, err
    assert "lossless: PASS (sampled: 64 positions (exact), PIT uniformity p = " in out
    gate = _coupled_gate(tmp_path / "clean")
    assert gate["identity"]["verdict"] in ("PASS", "NO-GATE") and gate["in_distribution"]["verdict"] == "PASS"
    assert "token for token" in gate["reason"] and sum(gate["pit_histogram"]) == 64

    from specdec_eval.workers.sampling import verify
    from specdec_eval.workers.sampling.keyed import target_probs

    def greedy(logits, params, seed, position):  # the bug: the keyed draw ignores its noise (both sides alike)
        return int(target_probs(logits.float().cpu(), params).argmax())

    monkeypatch.setattr(verify, "keyed_sample", greedy, raising=True)
    code, out, err = run_cli(capsys, *COUPLED, "--out", str(tmp_path / "greedy"))
    assert code == 1, err
    gate = _coupled_gate(tmp_path / "greedy")
    assert gate["verdict"] == "FAIL" and gate["in_distribution"]["verdict"] == "FAIL"
    assert gate["identity"]["verdict"] != "FAIL"  # identical twins: only the distribution shows it


def _coupled_gate(out_dir) -> dict:
    summaries = [
        json.loads((p / "summary.json").read_text()) for p in out_dir.iterdir() if (p / "summary.json").is_file()
    ]
    (gate,) = [s["tasks"]["gsm8k_sampled"]["lossless"] for s in summaries if "lossless" in s["tasks"]["gsm8k_sampled"]]
    return gate


@pytest.mark.slow
@needs_shared_data
def test_a_torchrun_job_scores_its_sampled_outputs_on_a_plain_engine_beside_every_rank(capsys, tmp_path):
    """`run --gpus 2` on CPU ranks (gloo): the job's rank 0 builds the scorer (a plain sibling of every rank's
    engine, sharing the target's weights), so the sampled task gets a verdict in a job too: PASS as it is, FAIL with
    the rejection sampler made greedy."""
    job = ("--gpus", "2", "--rank-timeout", "120")
    code, out, err = run_cli(capsys, *RUN, *job, "--out", str(tmp_path / "clean"))
    assert code == 0, err
    assert "lossless: PASS (sampled: 64 positions (exact)" in out
    _, gate = _lossless(tmp_path / "clean")
    assert gate["scorer"] == "our plain engine on the job's ranks, on the target's weights (exact)"
    code, out, err = run_cli(capsys, *RUN, *job, "--inject", "rejection_greedy", "--out", str(tmp_path / "greedy"))
    assert code == 1, err
    assert "lossless: FAIL (sampled: 64 positions" in out
