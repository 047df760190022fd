"""Teacher-forced scoring (`score_outputs`, workers/engine/teacher_forcing.py): one prefill-shaped pass gives the
logprobs the engine reported while generating, chunked or not, and each token's exact place in its sampling
distribution; it leaves the KV pool as it found it."""

from __future__ import annotations

import pytest
import torch
from specdec_eval.workers.config import SamplingParams, SpecConfig
from specdec_eval.workers.engine.teacher_forcing import sampling_view
from specdec_eval.workers.interface import ScoreRequest
from specdec_eval.workers.sampling.keyed import target_probs

from ...conftest import make_engine

PROMPTS = ["Once upon a time, in a village at the edge of a forest,", "The capital of France is"]
SAMPLED = SamplingParams(max_new_tokens=40, temperature=0.8, top_k=30, top_p=0.9, ignore_eos=True, logprobs=3)


@pytest.fixture(scope="module")
def generated(tiny):
    engine = make_engine(tiny, spec=SpecConfig(max_draft_len=3, sampling="rejection"))
    params = [SamplingParams(**{**SAMPLED.__dict__, "seed": i}) for i in range(len(PROMPTS))]
    return engine.generate(PROMPTS, params)


def _requests(outputs, top: int = 5) -> list[ScoreRequest]:
    return [ScoreRequest(tuple(o.prompt_token_ids), tuple(o.token_ids), SAMPLED, top) for o in outputs]


def test_scoring_gives_the_logprobs_the_spec_engine_reported(tiny, generated):
    baseline = make_engine(tiny)
    free = baseline.kv_manager.num_free_blocks
    scored = baseline.score_outputs(_requests(generated))
    assert baseline.kv_manager.num_free_blocks == free  # its blocks went back
    for out, s in zip(generated, scored, strict=True):
        assert s.error is None and len(s.logprobs) == len(out.token_ids) == len(s.sampled)
        reported = [rec[0] for rec in out.logprobs]
        assert max(abs(a - b) for a, b in zip(reported, s.logprobs, strict=True)) < 1e-4
        assert [[i for i, _ in rec[1]] for rec in out.logprobs] == [[i for i, _ in top[:3]] for top in s.top_logprobs]
        assert all(v.support != "out" for v in s.sampled)  # no emitted token outside the support
        assert all(r >= 1 for r in s.ranks) and len(s.top_logprobs[0]) == 5


def test_chunked_scoring_equals_one_pass(tiny, generated):
    whole = make_engine(tiny).score_outputs(_requests(generated))
    chunked = make_engine(tiny, max_num_tokens=16).score_outputs(_requests(generated))
    for a, b in zip(whole, chunked, strict=True):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
        assert [v.mass_above for v in a.sampled] == pytest.approx([v.mass_above for v in b.sampled], abs=1e-4)


def test_the_exact_view_is_the_plain_sampler_s_distribution():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(6, 40, generator=gen) * 2
    params = SamplingParams(temperature=0.7, top_k=10, top_p=0.8)
    tokens = [0, 5, 9, 13, 21, 39]
    for row, token, view in zip(logits, tokens, sampling_view(logits, tokens, params), strict=True):
        p = target_probs(row, params)
        assert view.prob == pytest.approx(float(p[token]), abs=1e-7)
        above = sum(float(q) for i, q in enumerate(p) if q > p[token] or (q == p[token] and i < token))
        if p[token] > 0:
            assert view.support == "in" and view.mass_above == pytest.approx(above, abs=1e-6)
        else:
            assert view.support in ("out", "edge")


def test_greedy_outputs_get_no_sampling_view_and_bad_requests_an_error(tiny):
    engine = make_engine(tiny)
    out = engine.generate(PROMPTS[:1], SamplingParams(max_new_tokens=8, ignore_eos=True))[0]
    (scored,) = engine.score_outputs(
        [ScoreRequest(tuple(out.prompt_token_ids), tuple(out.token_ids), SamplingParams(), 2)]
    )
    assert scored.sampled is None and len(scored.logprobs) == 8
    empty, too_long = engine.score_outputs([ScoreRequest((1, 2), (), SAMPLED), ScoreRequest((), (1,), SAMPLED)])
    assert empty.logprobs == [] and empty.error is None
    assert too_long.error is not None and "empty prompt" in too_long.error


def test_scoring_between_steps_leaves_running_requests_alone(tiny, generated):
    """What `serve` does: a prompt is scored between two engine steps while other requests decode."""
    engine = make_engine(tiny)
    alone = engine.generate(PROMPTS[:1], SamplingParams(max_new_tokens=20, ignore_eos=True))[0]
    rid = engine.add_request(PROMPTS[0], SamplingParams(max_new_tokens=20, ignore_eos=True))
    tokens = []
    for i in range(40):
        if i == 3:
            engine.score_outputs(_requests(generated))
        for delta in engine.step():
            if delta.request_id == rid:
                tokens.extend(delta.new_token_ids)
        if not engine.has_unfinished_requests:
            break
    assert tokens == alone.token_ids
