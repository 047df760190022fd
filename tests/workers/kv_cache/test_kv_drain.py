"""Every KV block back in the pool at drain: the manager's count of blocks no live request holds
(`unowned_blocks`), the engine's `kv_block_leak` event at the end of `generate` and when a server goes idle, and the
planted bug class that breaks it (`rewind_leaks_blocks`: blocks of rejected drafts never returned)."""

from __future__ import annotations

import pytest
from specdec_eval.workers.config import SamplingParams, SpecConfig
from specdec_eval.workers.events import failing_events
from specdec_eval.workers.kv_cache import KVCacheManagerV1, KVCacheManagerV2

from ...conftest import make_engine
from ...prompts import RAW_PROMPTS

GREEDY = SamplingParams(max_new_tokens=24, ignore_eos=True)


@pytest.mark.parametrize("cls", [KVCacheManagerV1, KVCacheManagerV2])
def test_a_rewind_that_drops_blocks_leaves_them_unowned(cls):
    for leaks in (False, True):
        kv = cls(16, 4, window_tokens=4, leaks_on_rewind=lambda leaks=leaks: leaks)
        assert kv.admit("a", list(range(6)), 20) == 0
        assert kv.block_table("a") == [0, 1, 2]  # the prompt and its first window of drafts (positions 0..9)
        kv.commit("a", list(range(7)))
        kv.rewind("a", 7)  # the drafts past 7 were rejected: the third block holds nothing kept
        assert len(kv.block_table("a")) == (2 if leaks or cls is KVCacheManagerV2 else 3)
        assert kv.unowned_blocks() == ({2: "a"} if leaks else {})
        kv.free("a")
        assert (kv.num_free_blocks == kv.num_blocks) is not leaks  # the leaked block never comes back
        assert len(kv.unowned_blocks()) == int(leaks)


def test_a_clean_engine_drains_and_names_no_leak(tiny):
    engine = make_engine(tiny, spec=SpecConfig(max_draft_len=3))
    engine.generate(RAW_PROMPTS[:4], GREEDY)
    assert engine.kv_manager.unowned_blocks() == {} and not engine.events.of_type("kv_block_leak")


@pytest.mark.parametrize("kv", ["v1", "v2"])
def test_the_planted_leak_is_a_failing_event_at_drain_and_changes_no_output(tiny, kv):
    clean = make_engine(tiny, kv, spec=SpecConfig(max_draft_len=3))
    leaky = make_engine(tiny, kv, spec=SpecConfig(max_draft_len=3), inject=("rewind_leaks_blocks",))
    expected = [o.token_ids for o in clean.generate(RAW_PROMPTS[:4], GREEDY)]
    assert [o.token_ids for o in leaky.generate(RAW_PROMPTS[:4], GREEDY)] == expected  # only the pool shrinks
    (leak,) = leaky.events.of_type("kv_block_leak")
    lost = leaky.kv_manager.num_blocks - leaky.kv_manager.num_free_blocks
    assert leak["num_blocks"] == lost > 0 and leak["detected_at"] == "generate: every request finished"
    assert leak["requests"] and set(leak["requests"]) <= {0, 1, 2, 3}
    assert failing_events(leaky.events.events) == [leak]
    leaky.generate(RAW_PROMPTS[:1], SamplingParams(max_new_tokens=2))
    counts = [e["num_blocks"] for e in leaky.events.of_type("kv_block_leak")]
    assert counts == sorted(set(counts))  # a leak is named once; a later event only when more leaked


def test_a_serving_engine_checks_when_it_goes_idle(tiny):
    engine = make_engine(tiny, "v2", spec=SpecConfig(max_draft_len=3), inject=("rewind_leaks_blocks",))
    ids = [engine.add_request(p, GREEDY) for p in RAW_PROMPTS[:2]]
    while engine.has_unfinished_requests:
        engine.step()
    (leak,) = engine.events.of_type("kv_block_leak")
    assert leak["detected_at"] == "serving: idle after a step" and set(leak["requests"]) <= set(ids)
