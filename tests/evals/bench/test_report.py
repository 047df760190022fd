"""The bench's per-batch row and the roofline formulas, on fake measurements and a hand-written model shape."""

from __future__ import annotations

import pytest
from specdec_eval.evals.bench import roofline
from specdec_eval.evals.bench.hardware import HardwareLimits
from specdec_eval.evals.bench.speed import BenchPlan, Measurement, summarise_row
from specdec_eval.workers.loading.model_config import ModelConfig

from specdec_eval.errors import UserError

# SmolLM2-135M's shape (shared/ENVIRONMENT.md)
SMOLLM2 = ModelConfig("llama", 49152, 576, 1536, 30, 9, 3, 64, tie_word_embeddings=True)
LIMITS = HardwareLimits("cpu", 2, 100.0, 2048, 10.0, 8.0, 256, 5)


def test_roofline_formulas_on_smollm2():
    """The figures the README reasons with: ~0.25 GFLOP per token of a ~1030-token prompt, ~540 MB of fp32
    weights per step, 46,080 B of fp32 KV per token."""
    assert roofline.layer_matmul_params(SMOLLM2) == 30 * (576 * (576 + 2 * 192) + 576 * 576 + 3 * 576 * 1536)
    per_token = roofline.prefill_flop(SMOLLM2, [1030]) / 1030
    assert 0.24e9 < per_token < 0.26e9
    assert roofline.step_weight_bytes(SMOLLM2, 4) == pytest.approx(538e6, rel=0.01)
    assert roofline.kv_bytes_per_token(SMOLLM2, 4) == 46_080
    # batch 32 at ~1060 tokens of context reads ~1.6 GB of KV per step on top of the weights
    step = roofline.decode_bytes(SMOLLM2, 4, steps=1, decode_tokens=32, mean_context=1060)
    assert step - roofline.step_weight_bytes(SMOLLM2, 4) == pytest.approx(1.56e9, rel=0.01)


def test_roofline_fractions():
    roof = roofline.Roofline(SMOLLM2, 4, LIMITS)
    flop = roofline.prefill_flop(SMOLLM2, [100, 200])
    r = roof.rates([100, 200], 2.0, 10, 20, 150.0, 0.5)
    assert r.prefill_gflops == pytest.approx(flop / 2.0 / 1e9)
    assert r.prefill_of_peak == pytest.approx(r.prefill_gflops / 100.0)
    assert r.decode_gbs == pytest.approx(roofline.decode_bytes(SMOLLM2, 4, 10, 20, 150.0) / 0.5 / 1e9)
    assert r.decode_of_bandwidth == pytest.approx(r.decode_gbs / 10.0)  # the faster probe, read here
    assert roof.rates([10], 0.0, 0, 0, 10.0, 0.0).to_dict() == {
        "prefill_gflops": 0.0,
        "prefill_of_peak": 0.0,
        "decode_gbs": 0.0,
        "decode_of_bandwidth": 0.0,
    }


def fake(outputs, elapsed, decode_s, accepted=0, cycles=0) -> Measurement:
    return Measurement(outputs, elapsed, sum(len(o) - 1 for o in outputs), decode_s, 100.0, accepted, cycles)


def test_row_reports_medians_spreads_identity_and_instability():
    out = [[1, 2, 3, 4], [5, 6, 7, 8]]
    other = [[1, 2, 3, 4], [5, 6, 7, 9]]
    results = {
        "ours": [fake(out, 1.0, 0.5), fake(out, 2.0, 1.0), fake(out, 1.0, 0.5)],
        "spec": [fake(out, 0.5, 0.25, 3, 4), fake(out, 1.0, 0.5, 3, 4), fake(out, 0.5, 0.25, 3, 4)],
        "hf": [fake(other, 2.0, 1.0), fake(other, 2.0, 1.0), fake(other, 8.0, 4.0)],
    }
    prompts = [[0] * 10, [0] * 20]
    row = summarise_row(2, prompts, 4, results, roofline.Roofline(SMOLLM2, 4, LIMITS))
    assert row["ours_tok_s"] == 8.0 and row["hf_tok_s"] == 4.0  # medians of 8/4/8 and 4/4/1
    assert row["spreads"]["ours_tok_s"]["per_round"] == [8.0, 4.0, 8.0]
    # per-round ratios ours/hf: 2, 1, 4 -> median 2; spec/plain: 2, 2, 2
    assert row["ours_vs_hf"] == 2.0 and row["spreads"]["ours_vs_hf"]["low"] == 1.0
    assert row["spec_vs_plain"] == 2.0 and row["spreads"]["spec_vs_plain"]["stable"]
    assert [line.split(" ranged")[0] for line in row["unstable"]] == [
        "UNSTABLE: batch 2 ours_vs_hf",
        "UNSTABLE: batch 2 ours_vs_hf_decode",
    ]
    assert row["acceptance_length"] == 1.75  # 1 + 9 accepted / 12 cycles over the rounds
    assert row["ours_identical_to_hf"] == "1/2" and row["spec_identical_to_plain"] == "2/2"
    assert row["rounds_identical"] and row["outputs_sha256"]["ours"] == row["outputs_sha256"]["spec"]
    assert row["outputs_sha256"]["ours"] != row["outputs_sha256"]["hf"]
    assert row["ours_prefill_gflops"] > 0 and 0 < row["ours_decode_of_bandwidth"]
    assert "spec_prefill_gflops" not in row  # the formulas describe plain decoding only


def test_rounds_that_disagree_are_flagged():
    results = {"ours": [fake([[1, 2]], 1.0, 0.5), fake([[1, 3]], 1.0, 0.5)]}
    row = summarise_row(1, [[0]], 2, results, None)
    assert row["rounds_identical"] is False and row["unstable"] == []


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(batch_sizes=(0,)), "must be positive"),
        (dict(rounds=1), "--rounds must be at least 2"),
        (dict(max_new_tokens=1), "--max-new-tokens"),
        (dict(prompts="web"), "--prompts must be builtin or gsm8k"),
        (dict(num_prompts=40), "the builtin set has 32 prompts"),
        (dict(batch_sizes=(1, 64)), "the builtin set has 32 prompts"),
    ],
)
def test_bad_plans_are_user_errors(kwargs, message):
    with pytest.raises(UserError, match=message):
        BenchPlan(**kwargs)


def test_batch_one_measures_its_own_prompts():
    plan = BenchPlan(batch_sizes=(1, 4), num_prompts=4, batch1_prompts=2)
    prompts = list(range(plan.prompt_count))
    assert plan.group(prompts, 1) == [0, 1] and plan.group(prompts, 4) == [0, 1, 2, 3]
    assert BenchPlan(batch_sizes=(1, 8), num_prompts=4).prompt_count == 8
