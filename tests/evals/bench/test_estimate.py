"""`bench`'s expected duration (evals/bench/estimate.py) and its default memory budget (evals/bench/budget.py):
the estimate on a fake side whose cost is known, the budget on a real tiny engine."""

from __future__ import annotations

import inspect
import json
import time

import pytest
import torch
from specdec_eval.cli import bench as bench_cli
from specdec_eval.evals.bench import speed as bench_module
from specdec_eval.evals.bench.budget import bench_device_memory
from specdec_eval.evals.bench.estimate import (
    Calibration,
    ModelBytes,
    describe_duration,
    estimate_bench,
    measurement_s,
    step_s,
)
from specdec_eval.evals.bench.hardware import HardwareLimits
from specdec_eval.evals.bench.speed import BenchPlan, Chunk, measure
from specdec_eval.workers.config import EngineConfig, SpecConfig
from specdec_eval.workers.loading.model_config import ModelConfig

from ...cli_helpers import run_cli
from ...conftest import make_engine

SIZE = ModelBytes(weights=500, kv_per_token=1)  # one request's KV at ~500 tokens of context reads as much as W


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def fake_side(clock: Clock, prefill_per_token: float, step1: float, per_step: float = 1.0, computed: int = 1):
    """A side whose time follows the model: prefill linear in tokens, a step scaled by the KV bytes it reads plus
    `computed` tokens' compute per extra request; `per_step` tokens per step (spec-dec's acceptance length)."""

    def run(prompts: list[list[int]], n: int) -> Chunk:
        b = len(prompts)
        clock.now += sum(map(len, prompts)) * prefill_per_token
        context = sum(map(len, prompts)) / b + n / 2
        kv = context * SIZE.kv_per_token
        step = step1 * (SIZE.weights + b * kv) / (SIZE.weights + kv) + (b - 1) * computed * prefill_per_token
        decode_s = (n - 1) / per_step * step
        clock.now += decode_s
        cycles = max(round((n - 1) / per_step), 1)
        acceptance = (round((per_step - 1) * cycles), cycles) if per_step > 1 else None
        return Chunk([[0] * n for _ in prompts], b * (n - 1), decode_s, acceptance)

    return run


def test_calibration_reads_prefill_and_step_times():
    cal = Calibration(prompt_tokens=1000, elapsed_s=3.0, decode_tokens=15, decode_s=1.0)
    assert cal.prefill_s_per_token == pytest.approx(0.002) and cal.step_s == pytest.approx(1 / 15)
    spec = Calibration(1000, 3.0, 15, 1.0, tokens_per_step=2.5, computed_per_step=4)
    assert spec.step_s == pytest.approx(1.0 / 6)  # 15 tokens in 6 steps
    assert step_s(cal, SIZE, 1, 500) == pytest.approx(cal.step_s)
    # 8 requests read the weights once and 8 caches; each extra one also costs one token of compute
    assert step_s(cal, SIZE, 8, 500) == pytest.approx(cal.step_s * (500 + 8 * 500) / 1000 + 7 * 0.002)
    assert step_s(spec, SIZE, 8, 500) - step_s(cal, SIZE, 8, 500) > 7 * 3 * 0.002 - 1e-9  # K + 1 tokens verified


def test_the_estimate_matches_a_side_that_follows_its_model(monkeypatch):
    """Calibrated on one prompt, the estimate of a whole measurement (warm-up, chunks, decode at the batch) comes
    out as what `measure` then takes, at batch 1 and batched, plain and spec-dec."""
    clock = Clock()
    monkeypatch.setattr(time, "perf_counter", clock)
    prompts = [[1] * (400 + 37 * i) for i in range(8)]
    plan = BenchPlan(batch_sizes=(1, 8), num_prompts=8, batch1_prompts=2, max_new_tokens=32, prompts="builtin")
    sides = {"ours": fake_side(clock, 0.002, 0.05), "spec": fake_side(clock, 0.002, 0.08, 2.0, computed=4)}
    estimate = estimate_bench(sides, prompts, plan, SIZE, draft_len=3, probe_s=10.0)
    assert estimate["calibration"]["spec"]["tokens_per_step"] == pytest.approx(2.0)
    total = 10.0
    for batch in (1, 8):
        for name, side in sides.items():
            started = clock.now
            measure(side, plan.group(prompts, batch), batch, plan.max_new_tokens, torch.device("cpu"))
            took = clock.now - started
            assert estimate["per_measurement_s"][str(batch)][name] == pytest.approx(took, rel=0.02), (batch, name)
            total += plan.rounds * took
    assert estimate["expected_s"] == pytest.approx(total, rel=0.02)
    assert estimate["measurements"] == plan.rounds * 2 * 2


def test_measurement_counts_the_warm_up_and_every_chunk():
    cal = Calibration(100, 1.0, 10, 0.5)  # prefill 5 ms per token, step 50 ms
    one = measurement_s(cal, SIZE, [100], 1, 11)
    two = measurement_s(cal, SIZE, [100, 100], 1, 11)  # one more chunk, same warm-up
    assert two - one == pytest.approx(one - (100 * cal.prefill_s_per_token + cal.step_s))


def test_durations_read_well():
    assert [describe_duration(s) for s in (42, 420, 3900)] == ["~42 s", "~7 min", "~1 h 05 min"]


def test_the_default_budget_holds_the_largest_batch(tiny):
    """An engine given bench_device_memory really fits max_batch_size requests of the longest prompt at once."""
    config = EngineConfig(model="tiny", device="cpu", max_batch_size=6, spec=SpecConfig(max_draft_len=3))
    ckpt, _ = tiny
    budget = bench_device_memory(config, ckpt.config, max_prompt_tokens=300, new_tokens=40)
    engine = make_engine(tiny, max_batch_size=6, device_memory=budget, spec=SpecConfig(max_draft_len=3))
    needed_blocks = 6 * -(-(300 + 40 + 4) // engine.kv_layout.block_size)
    assert engine.kv_manager.num_free_blocks >= needed_blocks
    assert budget <= engine.weights_bytes + 2 * needed_blocks * engine.kv_layout.bytes_per_block + 2**30


def test_smollm2_budget_at_the_default_plan_is_a_few_gib():
    """Five-shot GSM8K prompts (~1100 tokens) at batch 16: two engines and HF fit a 24 GB machine with room."""
    model = ModelConfig("llama", 49152, 576, 1536, 30, 9, 3, 64, tie_word_embeddings=True)  # SmolLM2-135M's shape
    config = EngineConfig(model="smollm2", device="cpu", max_batch_size=16, spec=SpecConfig(max_draft_len=3))
    assert 1.0 * 2**30 < bench_device_memory(config, model, 1200, 64) <= 2.5 * 2**30


def test_cli_defaults_are_the_plans():
    params = inspect.signature(bench_cli.bench).parameters
    plan = BenchPlan()
    assert params["batch_sizes"].default == ",".join(map(str, plan.batch_sizes))
    for cli_name, field in (
        ("num_prompts", "num_prompts"),
        ("batch1_prompts", "batch1_prompts"),
        ("max_new_tokens", "max_new_tokens"),
        ("rounds", "rounds"),
    ):
        assert params[cli_name].default == getattr(plan, field), cli_name


def test_estimate_only_prints_the_expected_duration_and_measures_nothing(capsys, monkeypatch):
    limits = HardwareLimits("cpu", 2, 100.0, 2048, 10.0, 8.0, 256, 5)  # the probes have their own tests
    monkeypatch.setattr(bench_module, "measure_limits_apart", lambda *a, **k: limits)
    argv = ["--model", "tiny", "--num-prompts", "4", "--batch1-prompts", "1", "--batch-sizes", "1,4", "-n", "8"]
    code, out, err = run_cli(capsys, "bench", *argv, "--skip-hf", "--estimate-only", "--json")
    assert code == 0, err
    estimate = json.loads(out)
    assert estimate["expected_s"] > 0 and set(estimate["calibration"]) == {"ours"}
    assert set(estimate["per_measurement_s"]) == {"1", "4"} and estimate["measurements"] == 2 * 2
    assert "bench: expected duration ~" in err and "bench: round" not in err
    assert "GiB per engine" in err  # no --device-memory: sized from the plan
