"""Scores over several samples per document: the clustered standard error (per-document means), its reduction to the
usual one with one sample per document, the design effect, the paired test over documents, and the simulation that
checks the stated error against the spread of clustered scores."""

from __future__ import annotations

import math

import pytest
from specdec_eval.evals.gates.accuracy_gate import clustered_hypothesis_test, clustered_note
from specdec_eval.evals.gates.references import Reference
from specdec_eval.results.paired import groups_of
from specdec_eval.results.sample_record import SampleRecord
from specdec_eval.stats.clustered import clustered_score, document_signs, paired_clustered
from specdec_eval.stats.mcnemar import mcnemar_exact
from specdec_eval.studies.clustered_scores import bootstrap, simulate


@pytest.fixture(autouse=True)
def _collect_engines():
    """Overrides conftest's per-test gc.collect: no engines are built here."""
    yield


def test_one_sample_per_document_is_the_usual_standard_error():
    ys = [100.0, 0.0, 0.0, 100.0, 100.0, 0.0, 0.0, 0.0]
    s = clustered_score({i: [y] for i, y in enumerate(ys)})
    p = 3 / 8
    assert s.score == pytest.approx(37.5)
    assert s.se == pytest.approx(100 * math.sqrt(p * (1 - p) * 8 / 7 / 8))  # sample sd / sqrt(n)
    assert s.se == pytest.approx(s.se_naive) and s.design_effect == 1.0 and s.n_effective == 8


def test_agreeing_samples_are_worth_one_per_document():
    """Every sample of a question alike: four samples carry what one does (deff = N, n_eff = D)."""
    one = clustered_score({d: [y] for d, y in enumerate([100, 0, 0, 100, 0])})
    four = clustered_score({d: [y] * 4 for d, y in enumerate([100, 0, 0, 100, 0])})
    assert four.score == one.score and four.se == pytest.approx(one.se)
    assert four.se_naive < four.se  # as if independent: too small by sqrt(deff)
    assert four.design_effect == pytest.approx(4.0) and four.n_effective == pytest.approx(5.0)


def test_independent_looking_samples_count_fully_and_the_clamp_holds():
    # within-document spread as large as between: deff near 1, clamped to [1, N]
    s = clustered_score({0: [100, 0, 100, 0], 1: [0, 100, 0, 100], 2: [100, 100, 0, 0], 3: [0, 0, 100, 100]})
    assert s.se == 0.0 and s.design_effect == 1.0 and s.n_effective == 16
    constant = clustered_score({0: [0, 0], 1: [0, 0]})  # nothing varies: the correlation is unknown, assume the worst
    assert constant.design_effect == 2.0 and constant.n_effective == 2.0


def test_documents_weigh_alike_whatever_their_sample_count():
    s = clustered_score({0: [100.0], 1: [0.0, 0.0, 0.0, 0.0], 2: []})
    assert s.n_docs == 2 and s.score == 50.0
    with pytest.raises(ValueError):
        clustered_score({0: []})


def test_the_gate_takes_the_effective_sample_count():
    ref = Reference("gpqa_diamond", "M", 30.0, {"accuracy": 30.0})
    agreeing = clustered_score({d: [y] * 4 for d, y in enumerate([100, 0, 0] * 20)})
    single = clustered_score({d: [y] for d, y in enumerate([100, 0, 0] * 20)})
    assert clustered_hypothesis_test(ref, agreeing).threshold == pytest.approx(ref.hypothesis_test(60).threshold)
    assert clustered_hypothesis_test(ref, single).threshold == pytest.approx(ref.hypothesis_test(60).threshold)
    pinned = Reference("gpqa_diamond", "M", 30.0, {"accuracy": 30.0, "num_samples": 198})
    assert clustered_hypothesis_test(pinned, agreeing).num_samples == 198  # an entry's own n still wins
    assert "60 documents x 4 samples" in clustered_note(agreeing)


def test_paired_test_over_documents():
    a = {d: [100.0, 100.0] for d in range(30)}
    b = {d: ([0.0, 0.0] if d < 10 else [100.0, 100.0]) for d in range(30)}
    r = paired_clustered(a, b)
    assert r.n_docs == 30 and r.delta == pytest.approx(-100 / 3) and r.p < 0.01
    same = paired_clustered(a, a)
    assert same.delta == 0 and same.p == 1.0
    shifted = paired_clustered({0: [0.0], 1: [0.0]}, {0: [100.0], 1: [100.0]})
    assert shifted.p == 0.0 and shifted.se == 0.0
    with pytest.raises(ValueError):
        paired_clustered({0: [1.0]}, {1: [1.0]})


def test_paired_test_with_one_sample_agrees_with_mcnemar_in_direction_and_size():
    a = {d: [100.0] for d in range(60)}
    b = {d: ([0.0] if d < 12 else [100.0]) for d in range(60)}
    b.update({d: [100.0] for d in range(12, 14)})
    a.update({d: [0.0] for d in range(12, 14)})
    r = paired_clustered(a, b)
    exact = mcnemar_exact(12, 2)
    assert r.delta < 0 and r.p < 0.05 and exact < 0.05


def test_document_signs_and_groups():
    a = {0: [100.0, 0.0], 1: [0.0], 2: [100.0], 3: [50.0]}
    b = {0: [0.0, 0.0], 1: [100.0], 2: [100.0]}
    assert document_signs(a, b) == [-1, 1, 0]
    samples = [
        SampleRecord("t", 3, 0, correct={"x": True}),
        SampleRecord("t", 3, 1, correct={"x": False}),
        SampleRecord("t", 5, 0, correct={"x": False}),
    ]
    assert groups_of(samples, "x") == {3: [100.0, 0.0], 5: [0.0]}


@pytest.mark.parametrize("icc", [0.0001, 0.3, 0.8])
def test_the_stated_error_holds_in_a_simulation_of_clustered_samples(icc):
    """The stated clustered error tracks the true spread of the score; the naive one falls short as the correlation
    grows; with nothing changed, the gate with the effective count keeps its false-FAIL rate near alpha, the naive
    one does not."""
    r = simulate(docs=40, repeats=4, mean=0.3, icc=icc, sims=20_000, seed=1)
    assert r.simulated_sd == pytest.approx(r.true_sd, rel=0.03)
    assert r.stated_se_rms == pytest.approx(r.true_sd, rel=0.05)
    assert 0.92 <= r.coverage <= 0.96
    assert 0.02 <= r.gate_false_fail <= 0.075 and r.sequential_false_fail <= 0.06
    if icc >= 0.3:
        assert r.naive_se_rms < 0.85 * r.true_sd and r.naive_gate_false_fail > r.gate_false_fail + 0.03


def test_bootstrap_of_a_recorded_run_matches_its_stated_error():
    groups = {str(d): ([1, 1, 0, 1] if d % 3 == 0 else [0, 0, 0, 1] if d % 3 == 1 else [0, 0, 0, 0]) for d in range(30)}
    b = bootstrap(groups, resamples=4000, seed=0)
    assert b["samples"] == 120 and b["docs"] == 30 and b["score"] == pytest.approx(100 / 3)
    # the bootstrap's plug-in variance is (D - 1) / D of the stated (sample) variance
    assert b["bootstrap_sd"] == pytest.approx(b["stated_se"] * (29 / 30) ** 0.5, rel=0.05)
    assert b["naive_se"] < b["stated_se"]
