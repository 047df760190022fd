"""The engine's logprobs and the margin rule on real decodes of the tiny model (evals/lossless/margins.py): recording
logprobs leaves every token as it was; in bf16 a plain decode at batch size 1 is the baseline, one at batch size 2
the control (on CPU only a batch of one takes other kernels), and a spec-dec decode at batch size 1 (1 + K rows per
verification) must PASS with every divergence a near-tie, while the planted `emit_rejected_draft` bug FAILs on the
divergence it makes."""

from __future__ import annotations

import pytest
from specdec_eval.evals.lossless.check import lossless_check
from specdec_eval.evals.lossless.identity_judge import judge_by_margins
from specdec_eval.evals.lossless.margins import noise_floor
from specdec_eval.results.sample_record import SampleRecord
from specdec_eval.workers.config import SamplingParams, SpecConfig

from ...conftest import make_engine

PROMPTS = ["The quick brown fox", "Once upon a time there was", "1 + 1 =", "Paris is the capital of"]


def _samples(engine, logprobs=3) -> list[SampleRecord]:
    outs = engine.generate(PROMPTS, SamplingParams(max_new_tokens=12, logprobs=logprobs))
    flags = {"strict-match": False, "flexible-extract": False}
    return [
        SampleRecord("t", i, prompt_hash=str(i), output_token_ids=o.token_ids, logprobs=o.logprobs, correct=flags)
        for i, o in enumerate(outs)
    ]


@pytest.fixture(scope="module")
def bf16(tiny):
    base = _samples(make_engine(tiny, dtype="bfloat16", max_batch_size=1))
    control = _samples(make_engine(tiny, dtype="bfloat16", max_batch_size=2))
    return base, control


def _judge(spec, base, control, dtype="bfloat16"):  # float32's exactness: tests/evals/lossless/test_margin_rule.py
    check = lossless_check(spec, base, dtype)["t"]
    return judge_by_margins(check, "t", spec, base, noise_floor(base, control, "t"), dtype, None, "control").record()


def test_logprobs_change_no_token(tiny):
    engine = make_engine(tiny, dtype="bfloat16", spec=SpecConfig())
    plain = engine.generate(PROMPTS[:3], SamplingParams(max_new_tokens=12))
    with_lp = engine.generate(PROMPTS[:3], SamplingParams(max_new_tokens=12, logprobs=5))
    assert [o.token_ids for o in plain] == [o.token_ids for o in with_lp]
    assert all(o.logprobs is None for o in plain)
    for o in with_lp:  # one record per token; greedy: each token is as likely as the best (bf16 has exact ties)
        assert len(o.logprobs) == len(o.token_ids)
        assert all(rec[0] == rec[1][0][1] and len(rec[1]) == 5 for rec in o.logprobs)


def test_clean_bf16_passes_with_near_ties_and_the_planted_bug_fails(tiny, bf16):
    base, control = bf16
    clean = _judge(_samples(make_engine(tiny, dtype="bfloat16", max_batch_size=1, spec=SpecConfig())), base, control)
    assert clean["verdict"] == "PASS", clean["reason"]
    assert all(d["margins"]["class"].startswith("near-tie") for d in clean["divergences"])
    bug = make_engine(tiny, dtype="bfloat16", max_batch_size=1, spec=SpecConfig(), inject=("emit_rejected_draft",))
    planted = _judge(_samples(bug), base, control)
    assert planted["verdict"] == "FAIL" and "beyond the noise bound" in planted["reason"]
    assert any(d["margins"]["class"] == "beyond-noise" for d in planted["divergences"])
