"""`bench --profile`: the split of each step into its parts adds up to the steps' time, prefill and decode steps apart,
and the engine is left exactly as it was (same outputs, no timer left behind)."""

from __future__ import annotations

import contextlib

import pytest
from specdec_eval.evals.bench.profile import PARTS, describe_split, profiled
from specdec_eval.workers.config import SamplingParams
from specdec_eval.workers.model.layers import attention, linear

from ...conftest import make_engine

PARAMS = SamplingParams(max_new_tokens=6, ignore_eos=True)
PROMPTS = [list(range(3, 40)), list(range(50, 70)), list(range(80, 130))]


def test_split_adds_up_and_the_engine_is_left_untouched(tiny):
    engine = make_engine(tiny, kv_enable_block_reuse=False)  # every call computes every prompt token
    before = [o.token_ids for o in engine.generate(PROMPTS, PARAMS)]
    funcs = (linear.linear, attention.paged_attention)
    parts = (engine.executor.target, engine.executor.verifier)
    with profiled(engine) as split:
        during = [o.token_ids for o in engine.generate(PROMPTS, PARAMS)]
    assert during == before
    assert (linear.linear, attention.paged_attention) == funcs
    assert (engine.executor.target, engine.executor.verifier) == parts
    assert not {"step", "_commit"} & set(vars(engine.executor))
    assert "schedule" not in vars(engine.scheduler) and "prepare" not in vars(engine.executor.meta)
    d = split.to_dict()
    assert d["prefill"]["steps"] == 1 and d["decode"]["steps"] == 5  # one step admits all three, then 5 decode steps
    assert d["prefill"]["tokens"] == sum(map(len, PROMPTS)) and d["decode"]["tokens"] == 5 * 3
    for kind in ("prefill", "decode"):
        parts = d[kind]["parts_s"]
        assert set(parts) == {name for name, _ in PARTS}
        assert all(v >= 0 for v in parts.values())
        assert sum(parts.values()) == pytest.approx(d[kind]["step_s"], abs=0.01)
        assert parts["matmuls"] > 0 and parts["attention"] > 0
    assert 0 <= d["loop_s"] <= d["call_s"]
    text = "\n".join(describe_split(d))
    assert "matmuls" in text and "1 prefill and 5 decode steps" in text
    assert [o.token_ids for o in engine.generate(PROMPTS, PARAMS)] == before


def test_profile_command_prints_the_split_and_the_prefix_hit_rate(capsys):
    from specdec_eval.cli.main import main

    with contextlib.suppress(SystemExit):
        main(["bench", "--profile", "--model", "tiny", "--device-memory", "256MiB", "--num-prompts", "4", "-n", "4"])
    out = capsys.readouterr().out
    assert "prefix    block reuse on: 0 of 123 prompt tokens" in out  # the warm-up prompt shares nothing
    assert "attention" in out and "decode steps" in out
