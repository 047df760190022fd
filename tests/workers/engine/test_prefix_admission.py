"""Prefix-aware admission: prompts that share a prefix (few-shot prompts) compute it once. A prompt whose next
uncached block another prompt of the same step is computing waits one step and reuses it; outputs are the same as
with every prompt computed in full."""

from __future__ import annotations

from specdec_eval.workers.config import SamplingParams

from ...conftest import make_engine

PARAMS = SamplingParams(max_new_tokens=6, ignore_eos=True)
SHARED = list(range(5, 5 + 70))  # 70 shared tokens: 8 full blocks of 8


def _prompts() -> list[list[int]]:
    return [SHARED + [100 + i, 200 + i, 300 + i] for i in range(4)]


def test_shared_prefix_is_computed_once_and_outputs_are_unchanged(tiny):
    reused = make_engine(tiny, kv_block_size=8)
    out = reused.generate(_prompts(), PARAMS)
    cached = [o.stats["num_cached_tokens"] for o in out]
    # The first prompt computes the shared blocks; the others, held back one step, reuse all 8 of them.
    assert cached == [0, 64, 64, 64]
    stats = reused.kv_manager.stats()
    assert stats["reuse_hit_tokens"] == 3 * 64
    full = make_engine(tiny, kv_block_size=8, kv_enable_block_reuse=False)
    assert [o.token_ids for o in out] == [o.token_ids for o in full.generate(_prompts(), PARAMS)]
    assert all(o.stats["num_cached_tokens"] == 0 for o in full.generate(_prompts(), PARAMS))


def test_a_short_shared_start_is_not_worth_a_step(tiny):
    """One shared block of 8 tokens out of 40 (a chat template's system turn): all admitted together, as before."""
    engine = make_engine(tiny, kv_block_size=8)
    prompts = [list(range(5, 13)) + [20 + i] * 32 for i in range(4)]
    engine.generate(prompts, SamplingParams(max_new_tokens=1, ignore_eos=True))
    assert engine.last_stats.num_steps == 1


def test_unrelated_prompts_are_admitted_together(tiny):
    engine = make_engine(tiny, kv_block_size=8)
    prompts = [[7 + i] * 40 for i in range(4)]
    engine.generate(prompts, SamplingParams(max_new_tokens=1, ignore_eos=True))
    assert engine.last_stats.num_steps == 1  # nothing shared: nothing held back


def test_the_token_budget_counts_only_tokens_to_compute(tiny):
    """A budget smaller than two whole prompts admits the other three together once the prefix is cached: each
    has 9 tokens to compute, not 73."""
    engine = make_engine(tiny, kv_block_size=8, max_num_tokens=80)
    engine.generate(_prompts(), SamplingParams(max_new_tokens=1, ignore_eos=True))
    assert engine.last_stats.num_steps == 2
