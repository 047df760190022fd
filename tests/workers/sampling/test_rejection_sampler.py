"""The rejection sampler (`--spec-sampling rejection`): its rule on hand-made rows, its
per-request random streams through the engine, the option that selects it, and the planted bugs of its path.
Its distribution is tested by chi-square in tests/evals/lossless/test_rejection_sampler_fit.py."""

from __future__ import annotations

import pytest
import torch
from specdec_eval.workers.config import EngineConfig, SamplingParams, SpecConfig
from specdec_eval.workers.engine_options import from_options
from specdec_eval.workers.faults import REJECTION_POINTS
from specdec_eval.workers.planted.rejection import CORRECT, RejectionRule, planted_rule, ruled_rejection_verify
from specdec_eval.workers.sampling.rejection import rejection_verify, request_stream, sample_from
from specdec_eval.workers.sampling.verify import verify

from specdec_eval.errors import UserError

from ...conftest import make_engine

T1 = SamplingParams(temperature=1.0)
ROWS = torch.log(torch.tensor([[0.5, 0.3, 0.2, 0.0 + 1e-30], [0.1, 0.6, 0.2, 0.1], [0.25, 0.25, 0.25, 0.25]]))


def _many(drafts, rule: RejectionRule = CORRECT, n: int = 3000, params=T1, q=None) -> list[list[int]]:
    stream = request_stream(7)
    if rule == CORRECT:  # the clean sampler itself
        return [rejection_verify(ROWS, drafts, params, stream, q) for _ in range(n)]
    return [ruled_rejection_verify(ROWS, drafts, params, stream, q, rule) for _ in range(n)]


def test_the_planted_sampler_with_no_bug_planted_is_the_clean_one():
    """The substitute verifier's sampler, every rule off, draws the same tokens from the same stream."""
    for drafts in ([0], [1, 1], [3, 2]):
        clean, ruled = request_stream(5), request_stream(5)
        assert [rejection_verify(ROWS, drafts, T1, clean) for _ in range(200)] == [
            ruled_rejection_verify(ROWS, drafts, T1, ruled) for _ in range(200)
        ]


def test_a_draft_of_probability_one_is_always_accepted_and_one_of_probability_zero_never():
    certain = torch.log(torch.tensor([[1e-30, 1.0, 1e-30], [0.2, 0.3, 0.5]]))
    stream = request_stream(0)
    assert all(rejection_verify(certain, [1], T1, stream)[0] == 1 for _ in range(200))
    top1 = SamplingParams(temperature=1.0, top_k=1)  # p is one-hot on token 2 at row 1
    assert all(rejection_verify(certain, [1], top1, stream) == [1, 2] for _ in range(50))
    assert all(rejection_verify(ROWS, [3], T1, stream)[0] != 3 for _ in range(500))


def test_after_a_rejection_the_draft_is_never_drawn_again_unless_the_bug_leaves_it_in():
    correct = _many([0])
    rejected = [e for e in correct if len(e) == 1]
    assert 0.4 * len(correct) < len(rejected) < 0.6 * len(correct)  # p(0) = 0.5
    assert all(e[0] != 0 for e in rejected)
    buggy = [e for e in _many([0], planted_rule(["residual_keeps_draft"])) if len(e) == 1]
    assert any(e[0] == 0 for e in buggy)  # the planted bug: the rejected draft comes back


def test_a_stream_is_the_request_seed_s_own_and_reproducible():
    assert rejection_verify(ROWS, [1, 1], T1, request_stream(3)) == rejection_verify(
        ROWS, [1, 1], T1, request_stream(3)
    )
    uniform = torch.tensor([0.25] * 4)
    assert len({sample_from(uniform, request_stream(seed)) for seed in range(40)}) > 1  # seeds differ


def test_sample_from_never_draws_a_token_of_probability_zero():
    probs = torch.tensor([0.0, 0.3, 0.0, 0.7, 0.0])
    stream = request_stream(1)
    assert {sample_from(probs, stream) for _ in range(2000)} == {1, 3}


def test_with_q_the_accept_test_is_min_one_p_over_q_and_the_residual_p_minus_q():
    q = torch.tensor([[0.5, 0.3, 0.2, 0.0]])  # equal to p at row 0: always accepted
    assert all(len(e) == 2 for e in _many([0], q=q, n=500))
    q = torch.tensor([[0.0, 0.0, 1.0, 0.0]])  # d = 2 proposed with certainty, accepted with p(2) = 0.2
    out = _many([2], q=q, n=3000)
    accepted = sum(len(e) == 2 for e in out) / len(out)
    assert 0.17 < accepted < 0.23
    assert all(e[0] in (0, 1) for e in out if len(e) == 1)  # the residual max(0, p - q) has no mass at 2


def test_verify_dispatches_on_the_request_s_stream():
    """No stream: the coupled keyed sampler (identical across calls); a stream: rejection sampling."""
    keyed = {tuple(verify(ROWS, [1, 1], T1, seed=4, position=0)) for _ in range(5)}
    assert len(keyed) == 1
    streamed = {tuple(verify(ROWS, [1, 1], T1, 4, 0, request_stream(i))) for i in range(30)}
    assert len(streamed) > 1
    assert verify(ROWS, [0, 0], SamplingParams(), None, 0, request_stream(0)) == [0, 1]  # greedy stays greedy


def test_each_planted_rule_changes_the_rule_where_it_applies():
    assert planted_rule([]) == CORRECT
    assert planted_rule(["rejection_greedy"]).greedy and planted_rule(["accept_neighbour_row"]).accept_row_offset == 1
    assert {p for p in REJECTION_POINTS if planted_rule([p]) != CORRECT} == set(REJECTION_POINTS)
    greedy = _many([2, 2], planted_rule(["rejection_greedy"]), n=50)
    assert all(e == [0] for e in greedy)  # the argmax of row 0, whatever the stream


# --- the option and the engine -------------------------------------------------------------------------------------


def test_the_option_reaches_the_spec_config_and_refuses_what_cannot_apply():
    assert from_options(spec="eagle3", spec_sampling="rejection").spec.sampling == "rejection"
    assert from_options(spec="eagle3").spec.sampling == "coupled"
    with pytest.raises(UserError, match="add --spec"):
        from_options(spec_sampling="rejection")
    with pytest.raises(UserError, match="ngram has none"):
        from_options(spec="ngram", spec_sampling="rejection-q")
    with pytest.raises(UserError, match="unknown spec sampling"):
        SpecConfig(sampling="lottery")
    with pytest.raises(UserError, match="add --spec-sampling rejection"):
        EngineConfig(model="tiny", spec=SpecConfig(), inject=("rejection_greedy",))
    assert EngineConfig(model="tiny", spec=SpecConfig(sampling="rejection"), inject=("rejection_greedy",)).inject


@pytest.fixture(scope="module")
def rejection_engine(tiny):
    return make_engine(tiny, spec=SpecConfig(max_draft_len=3, sampling="rejection"))


PROMPT = "Once upon a time, in a village at the edge of a forest,"


def _sampled(seed: int, **extra) -> SamplingParams:
    return SamplingParams(max_new_tokens=24, temperature=1.0, ignore_eos=True, seed=seed, **extra)


def test_seeds_are_honoured_whatever_the_batch(rejection_engine):
    together = rejection_engine.generate([PROMPT, "Hello", PROMPT], [_sampled(5), _sampled(9), _sampled(5)])
    alone = rejection_engine.generate([PROMPT], [_sampled(5)])[0]
    assert together[0].token_ids == together[2].token_ids == alone.token_ids
    other = rejection_engine.generate([PROMPT], [_sampled(6)])[0]
    assert other.token_ids != alone.token_ids


def test_rejection_and_coupled_sample_differently_from_one_seed(tiny, rejection_engine):
    coupled = make_engine(tiny, spec=SpecConfig(max_draft_len=3))
    plain = make_engine(tiny)
    seeds = [_sampled(s) for s in range(6)]
    assert [o.token_ids for o in coupled.generate([PROMPT] * 6, seeds)] == [
        o.token_ids for o in plain.generate([PROMPT] * 6, seeds)
    ]
    assert [o.token_ids for o in rejection_engine.generate([PROMPT] * 6, seeds)] != [
        o.token_ids for o in plain.generate([PROMPT] * 6, seeds)
    ]


def test_greedy_requests_are_unchanged_by_the_rejection_sampler(tiny, rejection_engine):
    greedy = SamplingParams(max_new_tokens=24, ignore_eos=True)
    plain = make_engine(tiny).generate([PROMPT], greedy)[0]
    assert rejection_engine.generate([PROMPT], greedy)[0].token_ids == plain.token_ids


def test_rejection_q_samples_drafts_from_the_head_and_keeps_q_beside_them(tiny):
    engine = make_engine(tiny, spec=SpecConfig(max_draft_len=2, sampling="rejection-q"))
    seen = []

    class Tap:
        def record(self, items, logits):
            for item in items:
                if not item.is_context and item.request.draft_probs is not None:
                    seen.append((item.request.draft_tokens, item.request.draft_probs))

    with engine.executor.tap_verify(Tap()):
        out = engine.generate([PROMPT], _sampled(3))[0]
    assert len(out.token_ids) == 24 and seen
    for drafts, q in seen:
        assert q.shape == (2, engine.model_config.vocab_size)
        assert torch.allclose(q.sum(-1), torch.ones(2), atol=1e-4)
        assert all(q[i, d] > 0 for i, d in enumerate(drafts))  # each draft was drawn from its q
    assert out.stats["acceptance"]["num_accepted_drafts"] > 0  # q drafts agree with p now and then (one-hot never here)


@pytest.mark.parametrize("point", REJECTION_POINTS)
def test_each_sampled_class_fires_on_the_rejection_path_and_is_recorded(tiny, point):
    engine = make_engine(tiny, spec=SpecConfig(max_draft_len=2, sampling="rejection"), inject=(point,))
    params = _sampled(1, top_k=20, top_p=0.9) if point == "spec_filter_order" else _sampled(1)
    if point == "accept_unit_temperature":
        params = SamplingParams(max_new_tokens=24, temperature=0.7, ignore_eos=True, seed=1)
    engine.generate([PROMPT], params)
    fired = [e for e in engine.collect_events() if e["type"] == "fault_injected"]
    assert fired and all(e["point"] == point for e in fired)
    engine.generate([PROMPT], SamplingParams(max_new_tokens=8, ignore_eos=True))  # greedy: the path is not taken
    assert len([e for e in engine.collect_events() if e["type"] == "fault_injected"]) == len(fired)


def test_a_sampled_class_whose_condition_fails_does_not_fire(tiny):
    """accept_unit_temperature at temperature 1 and spec_filter_order without both filters change nothing."""
    for point, params in (("accept_unit_temperature", _sampled(1)), ("spec_filter_order", _sampled(1, top_p=0.9))):
        engine = make_engine(tiny, spec=SpecConfig(max_draft_len=2, sampling="rejection"), inject=(point,))
        engine.generate([PROMPT], params)
        assert not [e for e in engine.collect_events() if e["type"] == "fault_injected"]
