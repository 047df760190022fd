"""Paired decoding: one prefill per prompt, then a speculative request and its plain twin decode from
it; outputs must be exactly what a separate spec-dec run and a separate plain run give."""

from __future__ import annotations

import pytest
from specdec_eval.workers.config import SamplingParams, SpecConfig

from specdec_eval.errors import UserError

from ...conftest import make_engine
from ...prompts import RAW_PROMPTS

GREEDY = SamplingParams(max_new_tokens=24, ignore_eos=True)
SAMPLED = SamplingParams(max_new_tokens=24, temperature=0.8, top_k=40, ignore_eos=True)


def _separate(tiny, kv, params, **kw):
    spec = make_engine(tiny, kv, spec=SpecConfig(max_draft_len=3), **kw)
    plain = make_engine(tiny, kv, **kw)
    return [o.token_ids for o in spec.generate(RAW_PROMPTS, params)], [
        o.token_ids for o in plain.generate(RAW_PROMPTS, params)
    ]


@pytest.mark.parametrize("kv", ["v1", "v2"])
@pytest.mark.parametrize(
    "extra",
    [{}, {"kv_max_tokens": 200, "kv_block_size": 8, "max_batch_size": 4}, {"kv_decode_copy": False}],
    ids=["roomy", "tight", "gather"],
)
def test_paired_outputs_equal_two_separate_runs(tiny, kv, extra):
    spec_ref, plain_ref = _separate(tiny, kv, GREEDY, **extra)
    engine = make_engine(tiny, kv, spec=SpecConfig(max_draft_len=3), **extra)
    spec_out, plain_out = engine.generate_paired(RAW_PROMPTS, GREEDY)
    assert [o.token_ids for o in spec_out] == spec_ref
    assert [o.token_ids for o in plain_out] == plain_ref
    assert all("acceptance" in o.stats for o in spec_out) and not any("acceptance" in o.stats for o in plain_out)
    assert engine.kv_manager.num_free_blocks == engine.kv_manager.num_blocks  # both branches gave every block back
    stats = engine.last_stats
    assert stats.num_requests == 2 * len(RAW_PROMPTS) and stats.acceptance["num_cycles"] > 0
    if "kv_max_tokens" in extra and kv == "v2":
        assert stats.num_preemptions > 0  # the tight pool did preempt


def test_paired_prefills_each_prompt_once(tiny):
    """The plain twins never run a context step of their own (the pool is roomy): their prompt tokens were computed
    by the speculative requests' prefill only."""
    engine = make_engine(tiny, spec=SpecConfig(max_draft_len=3))
    _, plain_out = engine.generate_paired(RAW_PROMPTS, GREEDY)
    assert all(o.stats["num_cached_tokens"] == o.stats["num_prompt_tokens"] for o in plain_out)


def test_paired_sampling_equals_separate_runs(tiny):
    spec_ref, plain_ref = _separate(tiny, "v2", SAMPLED, seed=4)
    engine = make_engine(tiny, "v2", spec=SpecConfig(max_draft_len=3), seed=4)
    spec_out, plain_out = engine.generate_paired(RAW_PROMPTS, SAMPLED)
    assert [o.token_ids for o in spec_out] == spec_ref and [o.token_ids for o in plain_out] == plain_ref


def test_pairs_stop_like_their_separate_runs(tiny):
    """Stop rules on both branches, including a first token that already ends both."""
    for params in (SamplingParams(max_new_tokens=1), SamplingParams(max_new_tokens=9, stop=("e",))):
        spec_ref, plain_ref = _separate(tiny, "v1", params)
        engine = make_engine(tiny, spec=SpecConfig(max_draft_len=2))
        spec_out, plain_out = engine.generate_paired(RAW_PROMPTS, params)
        assert [o.token_ids for o in spec_out] == spec_ref and [o.token_ids for o in plain_out] == plain_ref
        assert [o.finish_reason for o in spec_out] == [o.finish_reason for o in plain_out] or params.stop


def test_paired_needs_a_spec_engine(tiny):
    with pytest.raises(UserError, match="paired decoding needs a spec-dec engine"):
        make_engine(tiny).generate_paired(RAW_PROMPTS[:1], GREEDY)
