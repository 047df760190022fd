"""Engine behaviour on the tiny preset: v1 == v2, block reuse and preemption change no output, sampling,
stop rules."""

from __future__ import annotations

import pytest
from specdec_eval.workers.config import SamplingParams

from specdec_eval.errors import UserError

from ...conftest import make_engine
from ...prompts import RAW_PROMPTS

GREEDY = SamplingParams(max_new_tokens=24, ignore_eos=True)
# Prompts sharing a long prefix (as few-shot prompts do), so full KV blocks can be reused.
SHARED_PREFIX = "Question: what is two plus two? Answer: four. " * 4
PREFIXED = [SHARED_PREFIX + q for q in ("Question: three plus one?", "Question: five minus two?", "Q: 7?")]


def _tokens(engine, prompts, params=GREEDY):
    return [o.token_ids for o in engine.generate(prompts, params)]


def test_v1_and_v2_identical(tiny):
    prompts = RAW_PROMPTS + PREFIXED
    assert _tokens(make_engine(tiny, "v1"), prompts) == _tokens(make_engine(tiny, "v2"), prompts)


@pytest.mark.parametrize("kv", ["v1", "v2"])
def test_block_reuse_changes_no_output(tiny, kv):
    plain = make_engine(tiny, kv, kv_enable_block_reuse=False)
    reuse = make_engine(tiny, kv)
    expected = _tokens(plain, PREFIXED)
    # One prompt alone first, so the others find its blocks; then all again in one batch.
    first = reuse.generate(PREFIXED[:1], GREEDY)
    rest = reuse.generate(PREFIXED, GREEDY)
    assert [first[0].token_ids] == expected[:1]
    assert [o.token_ids for o in rest] == expected
    hits = [o.stats["num_cached_tokens"] for o in rest]
    assert all(h >= 16 for h in hits), hits  # the shared prefix came from cached blocks
    assert reuse.kv_manager.stats()["reuse_hit_tokens"] > 0
    assert plain.kv_manager.stats()["reuse_hit_tokens"] == 0


@pytest.mark.parametrize("kv", ["v1", "v2"])
def test_small_kv_cache_still_completes_identically(tiny, kv):
    """A pool that holds only a few requests at once: v1 admits fewer (whole-sequence reservation), v2 admits
    on demand and preempts; outputs stay identical to a roomy pool."""
    prompts = RAW_PROMPTS
    expected = _tokens(make_engine(tiny, kv), prompts)
    tight = make_engine(tiny, kv, kv_max_tokens=160, kv_block_size=8)
    assert tight.kv_layout.max_tokens <= 176
    assert _tokens(tight, prompts) == expected
    if kv == "v2":
        assert tight.last_stats.num_preemptions > 0  # the on-demand path really ran out and recovered


def test_continuous_batching_respects_max_batch_size(tiny):
    engine = make_engine(tiny, max_batch_size=3)
    expected = _tokens(make_engine(tiny), RAW_PROMPTS)
    assert _tokens(engine, RAW_PROMPTS) == expected
    assert engine.last_stats.num_steps > GREEDY.max_new_tokens  # requests had to take turns


def test_sampling_is_seeded_and_batch_invariant(tiny):
    engine = make_engine(tiny)
    params = SamplingParams(max_new_tokens=16, temperature=0.8, top_p=0.9, top_k=50, ignore_eos=True, seed=7)
    alone = engine.generate([RAW_PROMPTS[0]], params)[0].token_ids
    batched = engine.generate(RAW_PROMPTS[:5], [params] + [GREEDY] * 4)[0].token_ids
    assert alone == batched
    other = engine.generate([RAW_PROMPTS[0]], SamplingParams(**{**params.__dict__, "seed": 8}))[0].token_ids
    assert other != alone


def test_top_k_one_is_greedy(tiny):
    engine = make_engine(tiny)
    sampled = SamplingParams(max_new_tokens=16, temperature=1.3, top_k=1, ignore_eos=True)
    assert _tokens(engine, RAW_PROMPTS[:4], sampled) == _tokens(
        engine, RAW_PROMPTS[:4], SamplingParams(max_new_tokens=16, ignore_eos=True)
    )


def test_stop_rules(tiny):
    engine = make_engine(tiny)
    free = engine.generate([RAW_PROMPTS[1]], SamplingParams(max_new_tokens=24, ignore_eos=True))[0]
    assert free.finish_reason == "length" and len(free.token_ids) == 24
    stop = free.text[5:7]
    assert stop
    cut = engine.generate([RAW_PROMPTS[1]], SamplingParams(max_new_tokens=24, ignore_eos=True, stop=(stop,)))[0]
    assert cut.finish_reason == "stop"
    assert cut.text == free.text[: free.text.find(stop)]
    eos = next(iter(engine.eos_ids))
    forced = engine.generate([RAW_PROMPTS[1]], SamplingParams(max_new_tokens=24))[0]
    if eos in free.token_ids:
        assert forced.finish_reason == "eos" and forced.token_ids[-1] == eos
    else:
        assert forced.token_ids == free.token_ids


def test_prompt_too_long_is_a_user_error(tiny):
    engine = make_engine(tiny, max_seq_len=32)
    with pytest.raises(UserError, match="at most 31"):
        engine.generate(["x" * 100], GREEDY)
    out = engine.generate(["x" * 20], SamplingParams(max_new_tokens=100, ignore_eos=True))[0]
    assert len(out.prompt_token_ids) + len(out.token_ids) == 32  # output clamped to max_seq_len


def _failing_forward(engine, monkeypatch, fail_calls):
    calls = {"n": 0}
    original = engine.model.forward

    def failing(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] in fail_calls:
            raise RuntimeError(f"boom {calls['n']}")
        return original(*args, **kwargs)

    monkeypatch.setattr(engine.model, "forward", failing)


def test_a_failed_forward_is_retried_and_recovers(tiny, monkeypatch):
    expected = _tokens(make_engine(tiny), RAW_PROMPTS[:4])
    engine = make_engine(tiny)
    _failing_forward(engine, monkeypatch, {3})
    outs = engine.generate(RAW_PROMPTS[:4], GREEDY)
    assert [o.token_ids for o in outs] == expected
    assert all(o.finish_reason == "length" for o in outs)
    errors = engine.events.of_type("forward_error")
    assert len(errors) == 1 and "boom 3" in errors[0]["error"] and sorted(errors[0]["request_ids"]) == [0, 1, 2, 3]
    assert len(engine.events.of_type("request_retried")) == 4
    assert engine.last_stats.num_retries == 4 and engine.last_stats.num_failed == 0
    assert engine.kv_manager.num_free_blocks == engine.kv_manager.num_blocks


def test_a_request_that_keeps_failing_ends_as_an_error_not_an_answer(tiny, monkeypatch):
    engine = make_engine(tiny, max_retries=2)
    _failing_forward(engine, monkeypatch, set(range(2, 1000)))  # every forward after the first one
    outs = engine.generate(RAW_PROMPTS[:3], GREEDY)  # returns: never hangs, never raises
    assert all(o.finish_reason == "error" and "boom" in o.error for o in outs)
    assert engine.last_stats.num_failed == 3
    failed = engine.events.of_type("request_failed")
    assert sorted(e["request_id"] for e in failed) == [0, 1, 2] and all(e["retries"] == 2 for e in failed)
    assert engine.kv_manager.num_free_blocks == engine.kv_manager.num_blocks
    monkeypatch.undo()
    assert _tokens(engine, RAW_PROMPTS[:3]) == _tokens(make_engine(tiny), RAW_PROMPTS[:3])


def test_stats_split_prefill_from_decode(tiny):
    """The decode part of a call (what `bench` reports as the decode rate) starts once every request has its
    first token: with all prompts in one batch, that leaves n - 1 tokens per request."""
    engine = make_engine(tiny)
    engine.generate(RAW_PROMPTS, GREEDY)
    stats = engine.last_stats
    assert stats.decode_tokens == len(RAW_PROMPTS) * (GREEDY.max_new_tokens - 1)
    assert 0 < stats.all_started_s < stats.elapsed_s and stats.decode_s == stats.elapsed_s - stats.all_started_s


def test_each_output_says_when_its_request_arrived_and_finished(tiny):
    """Wall-clock seconds: what `drift` orders a task's documents by."""
    import time

    before = time.time()
    outputs = make_engine(tiny, "v1").generate(PREFIXED[:2], GREEDY)
    for o in outputs:
        assert before - 1 <= o.stats["sent_at"] <= o.stats["finished_at"] <= time.time() + 1
