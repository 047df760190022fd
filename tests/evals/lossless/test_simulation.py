"""The sampled gate's seeded simulation (evals/lossless/simulate.py, bank.py) at a reduced size: clean runs rarely
FAIL, each sampled bug class replayed through the real rejection sampler FAILs, and the command prints its figures.
The full sizes (500 clean runs, the real SmolLM2 bank) are the README's measurement."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from specdec_eval.studies.lossless_sampled import CONFIGS, main, null_rates, power_rates
from specdec_eval.studies.verify_bank import BankStep, load_bank, replay, save_bank
from specdec_eval.workers.faults import REJECTION_POINTS
from specdec_eval.workers.planted.rejection import CORRECT

FILTERED = CONFIGS["T=0.7 top-k 20 top-p 0.9"]


def synthetic_bank(docs: int = 10, steps: int = 60, vocab: int = 64, seed: int = 0) -> list[BankStep]:
    """Verify steps of K = 3 over a small vocabulary, each draft the argmax of its row (a drafter that proposes the
    likely token, as a trained head does)."""
    gen = torch.Generator().manual_seed(seed)
    bank = []
    for doc in range(docs):
        for _ in range(steps):
            scale = float(torch.empty(1).uniform_(1.0, 4.0, generator=gen))
            logits = torch.randn(4, vocab, generator=gen) * scale
            drafts = tuple(int(t) for t in logits[:3].argmax(-1))
            bank.append(BankStep(doc, np.arange(vocab), logits.numpy(), drafts))
    return bank


def test_clean_synthetic_runs_rarely_fail():
    for params in CONFIGS.values():
        rates = null_rates(runs=30, docs=4, tokens=128, vocab=200, params=params, seed=1)
        assert all(rate.fails <= 2 for rate in rates.values()), rates  # P(> 2 of 30 at 1%) < 0.004


@pytest.fixture(scope="module")
def bank():
    return synthetic_bank()


def test_every_sampled_class_fails_and_the_unmutated_sampler_passes_on_a_replayed_bank(bank):
    rates = power_rates(bank, FILTERED, ["unmutated", *REJECTION_POINTS], replicates=4, vocab=64, seed=2, blind=False)
    assert rates["unmutated"]["rate"].fails == 0
    for name in REJECTION_POINTS:
        assert rates[name]["rate"].fails == 4, (name, rates[name])
    assert rates["spec_filter_order"]["support_violations_in"] == 4  # caught by the support, not by luck


@pytest.mark.slow
def test_the_direct_tests_see_the_draws_after_a_rejection_and_uniforms_fixed_per_request(bank):
    """Where the run knows its drafts, the direct tests of the rejection sampler FAIL the two classes they exist for
    on their own (the residual's argmax after a rejection; the same uniforms at every step of a request), and the
    unmutated sampler passes them."""
    classes = ["unmutated", "recovered_residual_argmax", "uniforms_fixed_per_request"]
    rates = power_rates(bank, FILTERED, classes, replicates=2, vocab=64, seed=3, blind=False)
    assert rates["unmutated"]["rate"].fails == 0 and rates["unmutated"]["direct"] == 0
    assert rates["recovered_residual_argmax"]["direct"] == 2
    assert rates["uniforms_fixed_per_request"]["direct"] == 2
    samples = replay(bank, FILTERED, CORRECT, seed=0)
    assert all(s.drafts for s in samples) and replay(bank, FILTERED, CORRECT, 0, drafts_known=False)[0].drafts is None


def test_a_replay_places_every_emitted_token_and_the_bank_round_trips(bank, tmp_path):
    samples = replay(bank, FILTERED, CORRECT, seed=0)
    assert [s.doc_id for s in samples] == list(range(10))
    assert all(len(s.token_ids) == len(s.scored.sampled) >= 60 for s in samples)
    save_bank(bank[:5], tmp_path / "bank.npz")
    loaded = load_bank(tmp_path / "bank.npz")
    assert [(s.doc, s.drafts) for s in loaded] == [(s.doc, s.drafts) for s in bank[:5]]
    assert np.array_equal(loaded[3].logits, bank[3].logits)


def test_the_command_prints_its_figures(bank, tmp_path, capsys):
    main(["sampler", "--trials", "400"])
    out = capsys.readouterr().out
    assert "one-hot, T=1" in out and "rejection_greedy" in out and "min p" in out
    main(["--json", str(tmp_path / "null.json"), "null", "--runs", "2", "--docs", "1", "--tokens", "32"])
    assert "false FAIL 0/2" in capsys.readouterr().out and (tmp_path / "null.json").exists()
    save_bank(bank, tmp_path / "bank.npz")
    only = ["--config", "T=0.7 top-k 20 top-p 0.9", "--classes", "rejection_greedy", "restart_stream"]
    main(
        [
            "power",
            "--bank",
            str(tmp_path / "bank.npz"),
            "--replicates",
            "1",
            "--vocab-size",
            "64",
            *only,
            "--use-docs",
            "5",
        ]
    )
    out = capsys.readouterr().out
    assert "rejection_greedy" in out and "restart_stream" in out and "FAIL 1/1" in out
    assert "T=1.0" not in out and "residual_keeps_draft" not in out and "median within-request p" in out
