"""`python -m specdec_eval.studies.sequential_acceptance`: the gate's stated power against simulated runs drawn
from a real run's documents, and the paired tests' error rates drawn from two runs' pairs, printed and as JSON."""

from __future__ import annotations

import json
import random

import pytest
from specdec_eval.studies import sequential_acceptance as acceptance_study
from specdec_eval.studies.sequential_acceptance import design_effect, lowered, main

from ...results.test_runs_table import make_run


@pytest.fixture(autouse=True)
def _collect_engines():
    """Overrides conftest's per-test gc.collect: no engines are built here."""
    yield


def _samples(docs: list[tuple[int, int, list[int]]]) -> list[dict]:
    return [
        {
            "task": "gsm8k",
            "doc_id": d,
            "prompt_hash": f"p{d}",
            "output_token_ids": [1],
            "acceptance_length": 1 + a / c,
            "acceptance": {"num_cycles": c, "num_accepted_drafts": a, "accepted_per_position": p},
            "correct[flexible-extract]": False,
        }
        for d, (c, a, p) in enumerate(docs)
    ]


def _docs(seed: int, n: int, factor: float = 1.0) -> list[tuple[int, int, list[int]]]:
    out = []
    for d in range(n):
        rng = random.Random(seed * 100_000 + d)  # a document's draws are its own: the same text on both sides
        cycles = rng.randint(20, 80)
        rate = min(0.9, max(0.05, rng.gauss(0.55, 0.15))) * factor
        first = sum(rng.random() < rate for _ in range(cycles))
        second = sum(rng.random() < 0.5 for _ in range(first))
        third = sum(rng.random() < 0.5 for _ in range(second))
        out.append((cycles, first + second + third, [first, second, third]))
    return out


def test_the_study_prints_the_gate_and_the_paired_tests(tmp_path, capsys):
    a = make_run(tmp_path, 1, samples=_samples(_docs(1, 60)))
    b = make_run(tmp_path, 2, samples=_samples(_docs(1, 60, factor=0.92)))  # the same documents, a worse drafter
    assert main([str(a.path), str(b.path), "--n", "10,40", "--sims", "200", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    gate = report["gate"]
    assert gate["documents"] == 60 and gate["design_effect"] > 1  # documents as clusters: wider than cycles
    ten, forty = gate["rows"]
    assert ten["stated"]["band_wider_than_min_al"] and ten["stated"]["mde"] > forty["stated"]["mde"]
    assert ten["simulated_fail"]["unchanged"] < 0.05 and ten["simulated_fail"]["stated_mde"] > 0.5
    assert ten["simulated_mde"] > forty["simulated_mde"] > 0  # the drop 80 % of the simulated runs catch
    paired = report["paired"]
    assert paired["measured"]["verdict"] == "DROP" and paired["documents"] == 60
    cases = {(r["n"], r["case"].split(" (")[0]): r for r in paired["rows"]}
    assert cases[(40, "no change")]["fixed"]["drop"] < 0.1 and cases[(40, "exactly 5 %")]["fixed"]["drop"] > 0.5
    assert main([str(a.path), str(b.path), "--n", "10", "--sims", "50"]) == 0
    text = capsys.readouterr().out
    assert "design effect" in text and "Paired by document (A vs B over 60 shared documents): DROP" in text


def test_a_run_without_counts_is_one_error_line(tmp_path, capsys):
    plain = make_run(tmp_path, 1, samples=[{"task": "gsm8k", "doc_id": 0, "prompt_hash": "p0"}])
    assert main([str(plain.path)]) == 2
    assert "carries acceptance counts" in capsys.readouterr().err


def test_lowered_keeps_the_output_tokens_and_scales_the_al():
    import numpy as np

    pool = np.array([[10.0, 10.0], [20.0, 5.0]])
    low = lowered(pool, 0.1)
    assert np.allclose(low.sum(axis=1), pool.sum(axis=1))
    assert np.allclose(1 + low[:, 1] / low[:, 0], 0.9 * (1 + pool[:, 1] / pool[:, 0]))
    same = np.array([[50.0, 25.0]] * 40)
    assert design_effect(same, [0.3, 0.15, 0.05]) == 0.0  # identical documents: no spread between them
    assert acceptance_study.EXAMPLE.count("sequential_acceptance") == 1
