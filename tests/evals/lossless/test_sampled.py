"""The sampled lossless gate's statistics (evals/lossless/pit.py, evals/lossless/sampled.py) on hand-made and synthetic
distributions: placements exact and from the top logprobs agree where both apply, the PIT is uniform for draws from
p and not for a greedy or flattened sampler, support violations FAIL outright, reported logprobs are checked against
the scoring, and the verdict names its basis."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from specdec_eval.evals.lossless.sampled import SampledSample, judge_sampled
from specdec_eval.stats.pit import (
    Placement,
    exact_placement,
    likelihood_test,
    randomized_pit,
    smooth_test,
    tail_test,
    topk_placement,
    within_request_test,
)
from specdec_eval.studies.lossless_sampled import synthetic_run
from specdec_eval.workers.config import SamplingParams
from specdec_eval.workers.engine.teacher_forcing import sampling_view, view_of_probs
from specdec_eval.workers.interface import SampledPosition, ScoredOutput
from specdec_eval.workers.sampling.keyed import target_probs

T07 = SamplingParams(temperature=0.7, top_k=20, top_p=0.9)
T1 = SamplingParams(temperature=1.0)


def _row(seed: int, vocab: int = 200, scale: float = 3.0) -> torch.Tensor:
    return torch.randn(vocab, generator=torch.Generator().manual_seed(seed)) * scale


def _top(row: torch.Tensor, k: int = 20) -> list[list[float]]:
    values, ids = torch.topk(torch.log_softmax(row, -1), k)
    return [[int(i), float(v)] for i, v in zip(ids, values, strict=True)]


@pytest.mark.parametrize("params", [T1, SamplingParams(temperature=0.7, top_k=8), T07], ids=["T1", "topk8", "T07"])
def test_a_top_logprob_placement_agrees_with_the_exact_one_where_the_support_is_inside_the_top(params):
    for seed in range(30):
        row = _row(seed)
        probs = target_probs(row, params)
        for token in [t for t in torch.topk(probs, 5).indices.tolist() if probs[t] > 0]:
            (view,) = view_of_probs(probs.unsqueeze(0), [token])
            exact = exact_placement(view.prob, view.mass_above, view.support)
            own = float(torch.log_softmax(row, -1)[token])
            top = topk_placement(own, token, _top(row), params.temperature, params.top_k, params.top_p, 200, 1e-3)
            if top.kind == "exact":
                assert top.lo == pytest.approx(exact.lo, abs=1e-5) and top.width == pytest.approx(exact.width, abs=1e-5)
            else:  # conditional on the surely kept tokens: the same order, a larger share each
                assert top.kind in ("conditional", "edge")


def test_temperature_one_without_filters_lumps_the_tail_into_one_known_category():
    row = _row(1, scale=1.0)  # flat: much of the mass is below the top 20
    logp = torch.log_softmax(row, -1)
    below = int(torch.argsort(logp)[0])  # the least likely token
    placed = topk_placement(float(logp[below]), below, _top(row), 1.0, 0, 1.0, 200, 1e-3)
    mass_top = float(torch.exp(torch.topk(logp, 20).values).sum())
    assert placed.kind == "exact" and placed.lo == pytest.approx(mass_top, abs=1e-6)
    assert placed.width == pytest.approx(1 - mass_top, abs=1e-6)


def test_a_token_outside_top_k_is_a_violation_and_one_within_the_noise_is_at_the_edge():
    row = torch.tensor([5.0, 4.0, 3.0, 2.9995, 1.0, 0.0])
    logp = torch.log_softmax(row, -1)
    top = [[i, float(logp[i])] for i in range(6)]
    params = SamplingParams(temperature=1.0, top_k=3)
    assert topk_placement(float(logp[5]), 5, top, 1.0, 3, 1.0, 6, 1e-3).kind == "out"
    assert topk_placement(float(logp[3]), 3, top, 1.0, 3, 1.0, 6, 1e-3).kind == "edge"
    views = sampling_view(row.unsqueeze(0).repeat(2, 1), [5, 3], params)
    assert [v.support for v in views] == ["out", "edge"]


def test_a_token_below_the_top_logprobs_where_the_support_may_reach_is_counted_in_the_tail():
    row = _row(2, vocab=200, scale=0.5)
    logp = torch.log_softmax(row, -1)
    low = int(torch.argsort(logp)[0])
    placed = topk_placement(float(logp[low]), low, _top(row), 0.7, 0, 1.0, 200, 1e-3)
    assert placed.kind == "tail" and 0 < placed.tail_bound < 1
    true_tail = float(target_probs(row, SamplingParams(temperature=0.7))[torch.topk(logp, 20).indices].sum())
    assert placed.tail_bound >= 1 - true_tail  # an upper bound of the tail's sampling probability


def test_the_randomized_pit_of_draws_from_p_is_uniform_and_of_greedy_draws_is_not():
    rng = np.random.default_rng(0)
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(4000, 50, generator=gen) * 2
    probs = target_probs(logits, T1)
    drawn = torch.multinomial(probs, 1, generator=gen).squeeze(-1).tolist()
    greedy = probs.argmax(-1).tolist()
    for tokens, uniform in ((drawn, True), (greedy, False)):
        placements = [exact_placement(v.prob, v.mass_above, v.support) for v in view_of_probs(probs, tokens)]
        result = smooth_test(randomized_pit(placements, rng))
        assert (result.p_value > 0.01) is uniform, result
    assert smooth_test(randomized_pit(placements, rng)).components[0] < -5  # greedy: u piles up near 0


def test_the_tail_test_bounds_the_count_of_draws_below_the_top():
    assert tail_test([0.1] * 10, 0) == 1.0
    assert tail_test([0.1] * 10, 11) == 0.0
    assert tail_test([0.5], 1) == pytest.approx(0.5)
    assert tail_test([0.1] * 10, 1) == pytest.approx(1 - 0.9**10)
    assert tail_test([0.01] * 100, 8) < 1e-4


def _samples(run, **kw) -> list[SampledSample]:
    return [SampledSample(s.doc_id, s.token_ids, s.sampling, s.scored, **kw) for s in run]


def test_a_clean_run_passes_exactly_and_conservatively_and_says_so():
    exact, top = synthetic_run(torch.Generator().manual_seed(3), 4, 256, 300, T07)
    result = judge_sampled(exact, 300, seed=1)
    assert result.verdict == "PASS" and result.numbers["basis"] == "exact"
    assert result.reason.startswith(f"sampled: {result.numbers['positions']:,} positions (exact)")
    assert "no support violation" in result.reason and "PIT uniformity p = " in result.reason
    assert sum(result.numbers["pit_histogram"]) == result.numbers["positions"]
    assert len(result.numbers["pit_histogram"]) == 20
    conservative = judge_sampled(top, 300, seed=1)
    assert conservative.verdict == "PASS" and conservative.numbers["basis"] == "conservative"
    assert "conditional on the baseline's top logprobs: conservative" in conservative.reason


def test_a_greedy_sampler_fails_and_a_token_outside_the_support_fails_outright():
    gen = torch.Generator().manual_seed(4)
    logits = torch.randn(1024, 300, generator=gen) * 2
    probs = target_probs(logits, T07)
    greedy = probs.argmax(-1).tolist()
    run = [
        SampledSample(0, greedy, T07, ScoredOutput([0.0] * 1024, [[] for _ in greedy], view_of_probs(probs, greedy)))
    ]
    result = judge_sampled(run, 300)
    assert result.verdict == "FAIL" and "not draws from the target's sampling distribution" in result.reason
    assert result.numbers["pit"]["components"][0] < 0
    drawn = torch.multinomial(probs, 1, generator=gen).squeeze(-1).tolist()
    outside = int(torch.argsort(probs[7])[0])  # probability 0 under top-k 20
    drawn[7] = outside
    views = sampling_view(logits, drawn, T07)
    run = [SampledSample("d", drawn, T07, ScoredOutput([0.0] * 1024, [[] for _ in drawn], views))]
    result = judge_sampled(run, 300)
    assert result.verdict == "FAIL" and result.numbers["violations"] == [
        {"doc_id": "d", "position": 7, "token": outside}
    ]
    assert "1 token(s) outside the sampling support (top-k / top-p), the first at doc d position 7" in result.reason


@pytest.mark.parametrize("power", [1.0, 1.15, 0.85], ids=["clean", "sharper", "flatter"])
def test_the_likelihood_test_says_which_way_a_sampler_too_sharp_or_too_flat_is_off(power):
    """Draws from p^power renormalised over 4096 positions of varied sharpness: a 15 % error in the exponent moves the
    emitted tokens' probabilities far beyond their null spread, z's sign says which way, and the verdict says it."""
    gen = torch.Generator().manual_seed(11)
    logits = torch.randn(4096, 300, generator=gen) * torch.exp(torch.empty(4096, 1).uniform_(-1, 2, generator=gen))
    probs = target_probs(logits, T1)
    drawn = torch.multinomial(torch.softmax(torch.log(probs) * power, -1), 1, generator=gen).squeeze(-1).tolist()
    views = view_of_probs(probs, drawn)
    placements = [exact_placement(v.prob, v.mass_above, v.support, v.sum_p2, v.sum_p3) for v in views]
    z = likelihood_test(placements).z
    result = judge_sampled([SampledSample(0, drawn, T1, ScoredOutput([0.0] * 4096, [[] for _ in drawn], views))], 300)
    if power == 1.0:
        assert abs(z) < 3 and result.verdict == "PASS"
        assert "likelihood z = " in result.reason
    else:
        assert (z > 5) if power > 1 else (z < -5)
        assert result.verdict == "FAIL"
        assert ("over-drawn" if power > 1 else "under-drawn") in result.reason


def test_reported_logprobs_are_checked_against_the_scoring():
    exact, _ = synthetic_run(torch.Generator().manual_seed(5), 2, 64, 100, T1)
    scored = [s.scored for s in exact]
    for s in scored:
        s.logprobs = [-1.0 - 0.01 * i for i in range(64)]
    close = [[[lp + 2e-4, []] for lp in s.logprobs] for s in scored]
    ok = judge_sampled(_samples(exact, reported=close[0]), 100)
    assert ok.verdict == "PASS" and ok.numbers["target"]["max_abs_diff"] == pytest.approx(2e-4, abs=1e-6)
    assert "target logprobs at most 0.0002 nats off the baseline's scoring" in ok.reason  # 2e-4, two digits
    far = [list(r) for r in close[0]]
    far[9] = [far[9][0] + 0.05, []]
    bad = judge_sampled(_samples(exact, reported=far), 100)
    assert bad.verdict == "FAIL" and "off the baseline's scoring by more than 0.001 nats" in bad.reason
    assert bad.numbers["target"]["beyond"][0]["position"] == 9


def test_nothing_sampled_is_no_gate_and_scoring_errors_are_named():
    greedy = [SampledSample(0, [1, 2], SamplingParams(), ScoredOutput([0.0, 0.0], [[], []]))]
    assert judge_sampled(greedy, 10).verdict == "NO-GATE"
    failed = [SampledSample(3, [1, 2], T1, ScoredOutput([], [], error="HTTP 500"))]
    result = judge_sampled(failed, 10)
    assert result.verdict == "NO-GATE" and "1 could not be" in result.reason and result.numbers["score_errors"] == [3]
    assert "1 of them: HTTP 500" in result.reason  # the server's own message, not only a count
    assert result.numbers["score_error_reasons"] == [{"reason": "HTTP 500", "doc_ids": [3]}]


ORDER_FREE_NUMBERS = (
    "pit",
    "likelihood",
    "within_requests",
    "within_requests_weighted",
    "tail_test",
    "positions",
    "placements",
    "pit_histogram",
)


@pytest.mark.parametrize("scoring", ["exact", "top"])
def test_the_verdict_does_not_depend_on_the_order_of_documents(scoring):
    """Bit for bit, in every order: the statistics are summed exactly (a p-value once moved in its last bit between
    two CPUs, which sum in other orders)."""
    exact, top = synthetic_run(torch.Generator().manual_seed(6), 12, 64, 100, T07)
    run = exact if scoring == "exact" else top
    forward = judge_sampled(run, 100, seed=2)
    for order in range(6):
        shuffled = [run[i] for i in np.random.default_rng(order).permutation(len(run))]
        other = judge_sampled(shuffled, 100, seed=2)
        for key in ORDER_FREE_NUMBERS:
            assert forward.numbers.get(key) == other.numbers.get(key), key


def test_the_smooth_and_likelihood_statistics_are_exact_sums():
    """The sums are correctly rounded (math.fsum), so no summation order, SIMD width or CPU can move them."""
    u = np.random.default_rng(3).random(5000)
    x = 2 * u - 1
    first = math.fsum((math.sqrt(3) * x).tolist()) / math.sqrt(len(u))
    assert smooth_test(u).components[0] == first
    assert smooth_test(u[::-1].copy()).statistic == smooth_test(u).statistic
    placed = [Placement("exact", 0.0, w, 0.0, w * 0.9, w * 0.8) for w in np.random.default_rng(4).random(300)]
    assert likelihood_test(placed) == likelihood_test(placed[::-1])
    bounds = np.random.default_rng(5).random(200).tolist()
    assert tail_test(bounds, 120) == tail_test(bounds[::-1], 120)


def test_placements_outside_the_pit_draw_their_uniform_all_the_same():
    """One uniform per position, PIT or not: a position's u does not move when another is left out."""
    a = [Placement("exact", 0.0, 1.0), Placement("edge"), Placement("exact", 0.0, 1.0)]
    b = [Placement("exact", 0.0, 1.0), Placement("exact", 0.0, 1.0), Placement("exact", 0.0, 1.0)]
    ua = randomized_pit(a, np.random.default_rng(1))
    ub = randomized_pit(b, np.random.default_rng(1))
    assert ua[1] == ub[2] and len(ua) == 2
    assert math.isclose(exact_placement(0.2, 0.5, "in").lo, 0.5)
    assert exact_placement(0.0, 1.0, "edge").kind == "edge" and not SampledPosition(0.1, 0.2).support != "in"


def test_a_scoring_of_other_tokens_than_the_output_s_is_a_score_error():
    """A baseline server (or a proxy before it) that echoes other tokens than it was sent scored another output: the
    gate judged the tokens the scorer named and PASSed. It is a score error now, whatever the scorer's mode."""
    _, top = synthetic_run(torch.Generator().manual_seed(3), 4, 64, 300, T07)
    run = _samples(top)
    for sample in run:
        sample.scored.token_keys = list(sample.token_ids)[::-1]  # the echo, reversed
        sample.scored.output_keys = list(sample.token_ids)
    result = judge_sampled(run, 300, seed=1)
    assert result.verdict == "NO-GATE" and result.numbers["score_errors"] == [s.doc_id for s in run]
    assert "scored other tokens than the output's (from output token 0)" in result.reason
    for sample in run:
        sample.scored.token_keys = list(sample.token_ids)  # the output's own: evidence again
    assert judge_sampled(run, 300, seed=1).verdict == "PASS"
    run[0].scored.output_keys = None  # named by keys, but not told the output's: cannot be checked
    assert judge_sampled(run, 300, seed=1).numbers["score_errors"] == [run[0].doc_id]


def _grid_run(docs: int, tokens: int, stick: float, seed: int) -> list[SampledSample]:
    """Every position 50 equally likely tokens, the token at quantile w. stick = 0: w fresh at every position (a clean
    sampler); else a document keeps reading one number of its own with that probability (a stream restarted per
    step): each draw is still uniform alone, but a document's draws depend on each other."""
    rng = np.random.default_rng(seed)
    run = []
    for doc in range(docs):
        own = rng.random()
        w = np.where(rng.random(tokens) < stick, own, rng.random(tokens))
        tokens_ = [int(x * 50) for x in w]
        views = [SampledPosition(0.02, t * 0.02, "in", 0.02, 50 * 0.02**3) for t in tokens_]
        run.append(SampledSample(doc, tokens_, T1, ScoredOutput([0.0] * tokens, [[] for _ in tokens_], views)))
    return run


def test_the_within_request_test_sees_draws_that_depend_on_each_other_inside_a_request():
    """Draws each uniform alone, stuck to a number of their request's own a sixth of the time: the tests on all u at
    once pass them, the within-request test FAILs them and names the request most off; clean draws pass it."""
    clean = judge_sampled(_grid_run(40, 64, 0.0, seed=1), 50, seed=1)
    assert clean.verdict == "PASS" and clean.numbers["within_requests"]["p"] > 0.05
    assert "within requests p = " in clean.reason
    stuck = judge_sampled(_grid_run(40, 64, 1 / 6, seed=1), 50, seed=1)
    level = stuck.numbers["level"]
    assert stuck.numbers["pit"]["p"] > level and stuck.numbers["likelihood"]["p"] > level  # blind to it
    assert stuck.verdict == "FAIL" and stuck.numbers["within_requests"]["p"] < level
    assert "the draws within a request are not independent" in stuck.reason
    assert "not draws from the target's sampling distribution" not in stuck.reason
    assert stuck.numbers["within_requests"]["most_off"]["positions"] == 64


def test_the_within_request_test_keeps_its_level_and_is_an_exact_sum():
    """u i.i.d. U(0, 1) in requests of uneven lengths (4 to 120): p below 0.05 about 5 % of the time (400 seeded
    runs: 0.02 to 0.09 holds with probability > 0.99); the statistic is the same in any order of the requests."""
    rng = np.random.default_rng(7)
    p = [within_request_test([rng.random(n) for n in rng.integers(4, 120, size=10)]).p_value for _ in range(400)]
    assert 0.02 <= np.mean(np.array(p) < 0.05) <= 0.09
    requests = [rng.random(n) for n in (3, 50, 17, 90)]
    forward, backward = within_request_test(requests), within_request_test(requests[::-1])
    assert (forward.statistic, forward.p_value) == (backward.statistic, backward.p_value)
    assert within_request_test([]).p_value == 1.0


def _drafts(rng: np.random.Generator, steps: int, greedy_residual: bool) -> list:
    """One request's verified one-hot drafts on random rows (vocabulary 30): accepted with probability p(d); at a
    rejection a draw from the residual, or (`greedy_residual`) its argmax."""
    from specdec_eval.stats.rejection_draws import DraftVerdict, residual_placement

    out = []
    for _ in range(steps):
        p = rng.dirichlet(np.full(30, 0.3))
        d = int(p.argmax())
        if rng.random() < p[d]:
            out.append(DraftVerdict(float(p[d]), True))
            continue
        rest = p.copy()
        rest[d] = 0
        token = int(rest.argmax()) if greedy_residual else int(rng.choice(30, p=rest / rest.sum()))
        out.append(DraftVerdict(float(p[d]), False, residual_placement(p, d, token)))
    return out


def test_where_the_drafts_are_known_the_gate_fails_draws_after_a_rejection_off_the_residual():
    """Outputs right (a clean synthetic run) and drafts recorded: the direct tests join the verdict; a greedy draw
    at every rejection FAILs it by the residual test alone, named; clean draws PASS."""
    exact, _ = synthetic_run(torch.Generator().manual_seed(3), 6, 128, 300, T07)
    rng = np.random.default_rng(1)
    clean = judge_sampled(_samples(exact, drafts=None), 300, seed=1)
    with_drafts = [
        SampledSample(s.doc_id, s.token_ids, s.sampling, s.scored, None, _drafts(rng, 60, False)) for s in exact
    ]
    result = judge_sampled(with_drafts, 300, seed=1)
    assert result.verdict == "PASS" and "rejections (residual p = " in result.reason
    assert result.numbers["level"] < clean.numbers["level"]  # three more tests in the Bonferroni
    greedy = [SampledSample(s.doc_id, s.token_ids, s.sampling, s.scored, None, _drafts(rng, 60, True)) for s in exact]
    failed = judge_sampled(greedy, 300, seed=1)
    assert failed.verdict == "FAIL" and failed.numbers["rejection_draws"]["residual_p"] < failed.numbers["level"]
    assert "not draws from the residual distribution" in failed.reason
    assert "not draws from the target's sampling distribution" not in failed.reason
