"""The drift check: a run whose later documents draft worse shows DECAY with a small p-value; a run with no trend,
or one that improves, does not."""

from __future__ import annotations

import random

from specdec_eval.evals.sweep.drift import DECAY, NO_TREND, TOO_FEW, document_lengths, drift_test
from specdec_eval.results.sample_record import SampleRecord


def _noisy(trend: float, n: int = 60, seed: int = 0) -> list[float]:
    rng = random.Random(seed)
    return [2.5 + trend * i + rng.gauss(0.0, 0.25) for i in range(n)]


def test_a_decay_is_found_and_a_flat_or_rising_run_is_not():
    decaying = drift_test(_noisy(-0.01))  # -1 AL per 100 documents
    assert decaying.verdict == DECAY and decaying.p_decay < 0.01 and decaying.slope_per_100 < -0.5
    assert decaying.second_half_al < decaying.first_half_al
    for trend in (0.0, 0.01):
        assert drift_test(_noisy(trend, seed=1)).verdict == NO_TREND
    assert drift_test([2.0] * 20).verdict == NO_TREND  # no spread: no trend
    assert drift_test([2.0, 1.5]).verdict == TOO_FEW


def test_lengths_come_from_each_documents_counts_in_run_order():
    samples = [
        SampleRecord(task="t", doc_id=i, acceptance={"num_cycles": 10, "num_accepted_drafts": a})
        for i, a in enumerate((20, 0, 5))
    ]
    samples.insert(1, SampleRecord(task="t", doc_id=9))  # drafted nothing: left out
    assert document_lengths(samples) == [3.0, 1.0, 1.5]
