"""The direct tests of the rejection sampler's draws (stats/rejection_draws.py) and the weighted within-request test
(stats/pit.py): each keeps its level on clean draws and FAILs the bug it exists for, planted by hand here (the
planted classes' replays are in tests/evals/lossless/test_simulation.py)."""

from __future__ import annotations

import math

import numpy as np
from specdec_eval.stats.pit import Placement, likelihood_weights, within_request_test
from specdec_eval.stats.rejection_draws import DraftVerdict, rejection_draws_test, residual_placement


def test_a_residual_placement_ranks_the_residual_and_the_rejected_draft_is_outside_it():
    p = np.array([0.5, 0.3, 0.2])
    assert residual_placement(p, 0, 0).kind == "out"  # the rejected draft cannot follow its own rejection
    placed = residual_placement(p, 0, 2)  # residual (0, 0.6, 0.4): token 2 second, 0.6 ranked above it
    assert placed.kind == "exact" and math.isclose(placed.lo, 0.6) and math.isclose(placed.width, 0.4)
    assert math.isclose(placed.sum_p2, 0.6**2 + 0.4**2)
    q = np.array([0.2, 0.5, 0.3])  # max(0, p - q) = (0.3, 0, 0): only token 0 can follow
    assert residual_placement(p, 1, 0, q).width == 1.0 and residual_placement(p, 1, 2, q).kind == "out"


def _requests(rng, docs: int, steps: int, fixed: bool = False, greedy_residual: bool = False):
    """Per request, `steps` one-hot drafts verified by rejection sampling on random rows (vocabulary 30); `fixed`: the
    request's uniforms are the same at every step; `greedy_residual`: the residual's argmax after a rejection."""
    out = []
    for _ in range(docs):
        own = rng.random(2)
        verdicts = []
        for _ in range(steps):
            p = rng.dirichlet(np.full(30, 0.3))
            d = int(p.argmax()) if rng.random() < 0.7 else int(rng.integers(30))
            u = own if fixed else rng.random(2)
            if u[0] < p[d]:
                verdicts.append(DraftVerdict(float(p[d]), True))
                continue
            r = p.copy()
            r[d] = 0
            r /= r.sum()
            token = int(r.argmax()) if greedy_residual else int(np.searchsorted(np.cumsum(r), u[1] * r.sum()))
            verdicts.append(DraftVerdict(float(p[d]), False, residual_placement(p, d, min(token, 29))))
        out.append(verdicts)
    return out


def _test(requests, seed: int = 0):
    return rejection_draws_test(requests, [np.random.default_rng([seed, i]) for i in range(len(requests))])


def test_clean_draws_pass_every_direct_test():
    for seed in range(3):
        result = _test(_requests(np.random.default_rng(seed), 10, 60), seed)
        assert min(result.p_values().values()) > 0.001 and result.outside_residual == 0, result


def test_the_residual_test_fails_a_greedy_draw_after_a_rejection():
    result = _test(_requests(np.random.default_rng(1), 10, 60, greedy_residual=True))
    assert result.residual_p < 1e-4 and result.residual_components[0] < 0  # the likely tokens over-drawn
    assert result.accept_p > 0.001  # the accepts themselves are right


def test_the_within_request_accept_test_fails_uniforms_fixed_per_request():
    result = _test(_requests(np.random.default_rng(2), 10, 60, fixed=True))
    assert result.within_p < 1e-3 and result.requests == 10


def test_the_accept_test_fails_an_accept_rate_off_its_probabilities():
    rng = np.random.default_rng(3)
    a = rng.random((10, 60))
    always = [[DraftVerdict(float(x), True) for x in row] for row in a]
    result = _test(always)
    assert result.accept_z > 5 and result.accept_p < 1e-6


def test_the_within_request_accept_test_keeps_its_level():
    """Independent Bernoulli(a) decisions in 10 requests: p below 0.05 about 5 % of the time (300 seeded runs)."""
    rng = np.random.default_rng(4)
    below = 0
    for _ in range(300):
        a = [rng.random(int(n)) for n in rng.integers(5, 80, size=10)]
        requests = [[DraftVerdict(float(x), bool(rng.random() < x)) for x in ai] for ai in a]
        below += _test(requests).within_p < 0.05
    assert 0.02 <= below / 300 <= 0.09


def test_the_weighted_within_request_test_sees_dependence_where_the_token_probability_can_vary():
    """Most positions near-sure (weight ~0, fresh u), 40 a request informative and stuck to the request's own number
    a third of the time: the unweighted test is diluted by the near-sure ones, the weighted one sees it; equal
    weights give the unweighted test bit for bit."""
    rng = np.random.default_rng(0)
    us, ws = [], []
    for _ in range(20):
        own = rng.random()
        informative = np.where(rng.random(40) < 1 / 3, own, rng.random(40))
        us.append(np.concatenate([informative, rng.random(600)]))
        ws.append(np.concatenate([np.ones(40), np.full(600, 1e-3)]))
    weighted, plain = within_request_test(us, ws), within_request_test(us)
    assert weighted.p_value < 1e-3 and plain.p_value > 0.05
    equal = within_request_test(us, [np.ones(len(u)) for u in us])
    assert (equal.statistic, equal.p_value) == (plain.statistic, plain.p_value)


def test_the_weighted_within_request_test_keeps_its_level():
    rng = np.random.default_rng(6)
    below = 0
    for _ in range(300):
        sizes = rng.integers(4, 120, size=10)
        below += within_request_test([rng.random(n) for n in sizes], [rng.random(n) for n in sizes]).p_value < 0.05
    assert 0.02 <= below / 300 <= 0.09


def test_likelihood_weights_are_the_sd_of_the_token_probability_and_zero_where_unknown():
    placed = [Placement("exact", 0.0, 0.5, 0.0, 0.5, 0.25), Placement("edge"), Placement("exact", 0.0, 0.5)]
    assert likelihood_weights(placed).tolist() == [0.0, 0.0]  # sum p^3 - (sum p^2)^2 = 0 (two tokens of 1/2)
    assert math.isclose(likelihood_weights([Placement("exact", 0, 0.2, 0, 0.3, 0.1)])[0], math.sqrt(0.1 - 0.09))
