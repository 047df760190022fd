"""The rejection sampler's distribution on hand-made rows (evals/lossless/sampler_check.py): at every position of a
verify step the emitted tokens follow the plain sampler's p (chi-square goodness of fit, alpha 0.001 per position,
20,000 seeded trials: the outcome is fixed), one-hot drafts and drafts drawn from q alike; and each planted rule of
the sampled classes fails the same test on a case where it applies (the test can fail)."""

from __future__ import annotations

import pytest
from specdec_eval.studies.rejection_sampler_fit import CASES, chi_square_check
from specdec_eval.workers.faults import REJECTION_POINTS
from specdec_eval.workers.planted.rejection import CORRECT, planted_rule

ALPHA = 0.001
TRIALS = 20_000
BY_NAME = {case.name: case for case in CASES}
# Where each planted rule shows: it needs a temperature other than 1, both filters, or nothing in particular.
CAUGHT_ON = {
    "rejection_greedy": "one-hot, T=1",
    "residual_keeps_draft": "one-hot, T=1",
    "accept_unit_temperature": "one-hot, T=0.7 top-k 4 top-p 0.8",
    "spec_filter_order": "one-hot, top-k 2 top-p 0.5",
    "accept_neighbour_row": "one-hot, T=1",
    "restart_stream": "one-hot, T=1",
    "recovered_residual_argmax": "one-hot, T=1",
    "uniforms_fixed_per_request": "one-hot, T=1",
}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_rejection_sampler_emits_the_target_distribution(case):
    results = chi_square_check(case, CORRECT, TRIALS, seed=0)
    assert len(results) == len(case.logits) or case.params.top_k  # every position reached (top-k 1 may stop early)
    for r in results:
        assert r.p_value > ALPHA, f"{case.name}: position {r.position} chi2 {r.statistic:.1f} df {r.df}"


@pytest.mark.parametrize("point", REJECTION_POINTS)
def test_each_planted_rule_fails_the_fit_where_it_applies(point):
    results = chi_square_check(BY_NAME[CAUGHT_ON[point]], planted_rule([point]), TRIALS, seed=0)
    assert min(r.p_value for r in results) < 1e-6, point


def test_the_q_case_fails_when_drafts_are_not_drawn_from_the_q_that_verifies_them(monkeypatch):
    """Drafts proposed greedily (the argmax of q) but verified with q's min(1, p/q) and residual max(0, p - q): not
    lossless (Hugging Face's assistant, #32867). The q case's fit must see it. (The one-hot rule itself is lossless
    for drafts from any q: only a q that is not the drafts' own breaks the rule.)"""
    from specdec_eval.studies import rejection_sampler_fit as sampler_check

    monkeypatch.setattr(sampler_check, "sample_from", lambda probs, stream: int(probs.argmax()))
    results = chi_square_check(BY_NAME["q drafts, T=1"], CORRECT, TRIALS, seed=0)
    assert min(r.p_value for r in results) < 1e-6
