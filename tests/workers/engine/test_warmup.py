"""General warmup: max shapes, tolerated OOMs recorded as warmup_oom events, and the canary it enables."""

from __future__ import annotations

import pytest
from specdec_eval.workers.config import SamplingParams, SpecConfig
from specdec_eval.workers.memory.budget import draft_activation_bytes, forward_activation_bytes

from ...conftest import make_engine
from ...prompts import RAW_PROMPTS

PARAMS = SamplingParams(max_new_tokens=16, ignore_eos=True)
PROMPTS = RAW_PROMPTS[:4]
BUDGET = 256 * 2**20


@pytest.fixture(scope="module")
def fault_free(tiny):
    return [o.token_ids for o in make_engine(tiny).generate(PROMPTS, PARAMS)]


def _engine(tiny, kv, guard="template", **kw):
    return make_engine(
        tiny,
        kv,
        spec=SpecConfig(max_draft_len=3, guard=guard),
        warmup="on",
        max_num_tokens=256,
        device_memory=BUDGET,
        **kw,
    )


def test_clean_warmup_runs_both_max_shapes(tiny, fault_free):
    engine = _engine(tiny, "v1")
    assert engine.warmup_shapes() == [(256, 0), (64, 64)]
    assert engine.events.counts() == {}
    assert engine.kv_manager.num_free_blocks == engine.kv_manager.num_blocks
    assert [o.token_ids for o in engine.generate(PROMPTS, PARAMS)] == fault_free


@pytest.mark.parametrize("kv", ["v1", "v2"])
@pytest.mark.parametrize("guard", ["template", "none"])
def test_injected_warmup_oom(tiny, fault_free, kv, guard, caplog):
    engine = _engine(tiny, kv, guard, inject=("warmup_oom",))
    oom = engine.events.of_type("warmup_oom")
    assert len(oom) == 1 and oom[0]["num_tokens"] == 256 and oom[0]["num_gen_tokens"] == 0
    assert "OOM during general warmup with 256 tokens, 0 generation tokens. Skipping." in caplog.text
    outs = engine.generate(PROMPTS, PARAMS)
    if guard == "template":
        assert [o.token_ids for o in outs] == fault_free
        assert engine.events.of_type("spec_state_restored")[0]["cause"].startswith("OutOfMemoryError")
        assert engine.events.of_type("spec_state_leak") == []
    else:
        assert all(o.finish_reason == "error" and "never restored" in o.error for o in outs)
        assert engine.events.of_type("spec_state_leak")[0]["fields"] == ["seq_lens", "kv_lens", "num_contexts"]


def test_same_budget_v2_quota_ooms_where_v1_does_not(tiny, fault_free):
    """One CPU budget, one KV setting (a v2 byte quota): v1 sizes by tokens from what is left after the
    activation estimate and ignores the byte quota; v2 takes the quota, which leaves less headroom than the
    Eagle3 draft pass of the max context shape needs, so that warmup forward runs out of memory *after* the
    worker saved its metadata. The guarded worker restores it and serving is unaffected."""
    v1 = _engine(tiny, "v1")
    cfg, head = v1.model_config, v1.draft_model.config
    tokens = v1.warmup_shapes()[0][0]
    target_need = forward_activation_bytes(cfg, tokens, 1, 4, 1)
    draft_need = draft_activation_bytes(head.layer, cfg.hidden_size, head.draft_vocab_size, tokens, 1, 4, 1)
    assert draft_need > target_need  # the draft pass is the larger allocation of a one-model forward
    quota = BUDGET - v1.weights_bytes - (target_need + draft_need) // 2
    v1_quota = _engine(tiny, "v1", kv_max_total_bytes=quota)
    v2 = _engine(tiny, "v2", kv_max_total_bytes=quota)
    assert v1_quota.events.of_type("warmup_oom") == []
    oom = v2.events.of_type("warmup_oom")
    assert oom and oom[0]["num_tokens"] == tokens and oom[0]["num_gen_tokens"] == 0
    assert oom[0]["requested_bytes"] == draft_need > oom[0]["free_bytes"] >= target_need
    assert "Eagle3 draft pass" in oom[0]["error"]
    assert v2.kv_layout.total_bytes > v1_quota.kv_layout.total_bytes
    assert [o.token_ids for o in v2.generate(PROMPTS, PARAMS)] == fault_free
