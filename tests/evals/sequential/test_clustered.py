"""The sequential designs with several correlated samples per document (evals/sequential/clustered_study.py): the
accuracy design on per-document means keeps its false-FAIL rate and its power whatever the intra-class correlation,
the A/B on document signs keeps its false B-WORSE rate, and the study sees a design that takes the samples as
independent break alpha."""

from __future__ import annotations

import math

import pytest
from specdec_eval.studies.sequential_clustered import main, study

ALPHA, BETA, SIMS = 0.05, 0.2, 4000
SLACK = 3 * math.sqrt(ALPHA * (1 - ALPHA) / SIMS)  # three Monte-Carlo standard errors at alpha


@pytest.fixture(autouse=True)
def _collect_engines():
    """Overrides conftest's per-test gc.collect: no engines are built here."""
    yield


@pytest.mark.parametrize("ref, icc", [(65.0, 0.0001), (65.0, 0.5), (50.0, 0.99)])
def test_the_accuracy_design_on_document_means_keeps_alpha_and_power(ref, icc):
    """At ref 50 with icc 0.99 a document's mean is nearly a fair coin of 0 or 100: the two-sample model itself,
    where the bound sigma = 50 is attained."""
    point = study(60, 4, 10, ref, icc, ALPHA, BETA, sims=SIMS, ab_sims=300, seed=3)
    assert point.false_fail <= ALPHA + SLACK and point.false_fail_noisy_ref <= ALPHA + SLACK, point
    assert point.power >= 1 - BETA - 3 * math.sqrt(BETA * (1 - BETA) / SIMS), point
    assert point.documents_at_ref < 60  # it does stop early


def test_the_study_catches_a_design_that_takes_samples_as_independent():
    point = study(60, 4, 10, 65.0, 0.9, ALPHA, BETA, sims=SIMS, ab_sims=10, seed=3)
    assert point.false_fail_as_independent > ALPHA + SLACK, point
    assert point.false_fail <= ALPHA + SLACK, point


def test_the_ab_on_document_means_keeps_alpha():
    sims = 1000
    point = study(100, 3, 10, 65.0, 0.3, ALPHA, BETA, sims=10, ab_sims=sims, seed=4)
    assert point.ab_false_b_worse <= ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / sims), point


def test_the_command_prints_its_table(capsys):
    assert (
        main(["--docs", "20", "--repeats", "2", "--batch", "5", "--sims", "200", "--ab-sims", "20", "--icc", "0.3"])
        == 0
    )
    out = capsys.readouterr().out
    assert "20 documents x 2 samples" in out and "as if indep." in out and len(out.splitlines()) == 7
    with pytest.raises(SystemExit):
        main(["--icc", "1.5"])
