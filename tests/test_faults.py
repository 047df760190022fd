"""Fault matrix: every injection point x kv v1/v2 x guard. Guard template: no leak, outputs identical to the
fault-free run. Guard none: the failure is detected and reported (never a hang, never silently wrong)."""

from __future__ import annotations

import pytest
from specdec_eval.workers.config import SamplingParams, SpecConfig
from specdec_eval.workers.errors import UserError
from specdec_eval.workers.faults import FaultSpec

from .conftest import make_engine
from .prompts import RAW_PROMPTS

PARAMS = SamplingParams(max_new_tokens=16, ignore_eos=True)
PROMPTS = RAW_PROMPTS[:4]
# Step 2 is a generation step carrying drafts (step 0: contexts, then decoding).
POINTS = ["prepare_for_spec_dec@2", "draft_step:0@2", "draft_step:2@2", "target_forward@2", "restore@2"]
# Points that fire after the worker saved its metadata: unguarded, they leave stale state behind.
LEAVES_STATE = {"prepare_for_spec_dec@2", "draft_step:0@2", "draft_step:2@2", "restore@2"}


@pytest.fixture(scope="module")
def fault_free(tiny):
    return [o.token_ids for o in make_engine(tiny).generate(PROMPTS, PARAMS)]


def _engine(tiny, kv, guard, inject):
    return make_engine(tiny, kv, spec=SpecConfig(max_draft_len=3, guard=guard), inject=(inject,))


@pytest.mark.parametrize("kv", ["v1", "v2"])
@pytest.mark.parametrize("point", POINTS)
def test_guard_template_survives_every_fault(tiny, fault_free, kv, point):
    engine = _engine(tiny, kv, "template", point)
    outs = engine.generate(PROMPTS, PARAMS)
    ev = engine.events
    assert len(ev.of_type("fault_injected")) == 1 and ev.of_type("fault_injected")[0]["spec"] == point
    assert len(ev.of_type("forward_error")) == 1
    assert ev.of_type("spec_state_leak") == [] and ev.of_type("request_failed") == []
    assert [o.token_ids for o in outs] == fault_free
    assert engine.executor.meta.saved_fields == ()
    assert engine.kv_manager.num_free_blocks == engine.kv_manager.num_blocks
    if point in LEAVES_STATE:
        assert ev.of_type("spec_state_restored")[0]["fields"] == ["seq_lens", "kv_lens", "num_contexts"]


@pytest.mark.parametrize("kv", ["v1", "v2"])
@pytest.mark.parametrize("point", POINTS)
def test_guard_none_failure_is_detected(tiny, fault_free, kv, point):
    engine = _engine(tiny, kv, "none", point)
    outs = engine.generate(PROMPTS, PARAMS)  # returns: bounded retries, no hang
    ev = engine.events
    assert len(ev.of_type("fault_injected")) == 1
    if point in LEAVES_STATE:
        # The stale-state signature: a leak event naming the fields, and every request failed with the
        # assertion that names them. Nothing is returned as a normal answer.
        assert ev.of_type("spec_state_leak")[0]["fields"] == ["seq_lens", "kv_lens", "num_contexts"]
        assert all(o.finish_reason == "error" and "never restored" in o.error for o in outs)
        assert engine.last_stats.num_failed == len(PROMPTS)
    else:
        # Before any state was saved: nothing to leak, the retry recovers even without the guard.
        assert ev.of_type("spec_state_leak") == []
        assert [o.token_ids for o in outs] == fault_free
    assert engine.kv_manager.num_free_blocks == engine.kv_manager.num_blocks


def test_plain_decoding_target_fault_is_retried(tiny, fault_free):
    engine = make_engine(tiny, inject=("target_forward@3x2",))
    outs = engine.generate(PROMPTS, PARAMS)
    assert [o.token_ids for o in outs] == fault_free
    assert len(engine.events.of_type("fault_injected")) == 2 and engine.last_stats.num_failed == 0


@pytest.mark.parametrize("text", ["bogus", "restore:1", "draft_step@x", "target_forward@3x0"])
def test_bad_inject_spec_is_a_user_error(text):
    with pytest.raises(UserError, match="inject"):
        FaultSpec.parse(text)


def test_random_step_is_seeded():
    assert FaultSpec.parse("restore@random", seed=1) == FaultSpec.parse("restore@random", seed=1)
    assert {FaultSpec.parse("restore@random", seed=s).step for s in range(20)} != {None}
