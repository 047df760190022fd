"""The verdict benchmark's orchestration on a fake run pipeline (no model), and one real run on the tiny model."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from specdec_eval.evals.bench import verdict_timing as vb
from specdec_eval.evals.bench.hardware import HardwareLimits
from specdec_eval.results.run_summary import RunSummary
from specdec_eval.workers.engine_options import from_options
from specdec_eval.workers.interface import GenerateStats

from specdec_eval.errors import UserError

LIMITS = HardwareLimits("cpu", 2, 100.0, 64, 10.0, 8.0, 4, 2)
SPEC = from_options(model="tiny", spec="eagle3", draft_len=2)


def fake_stats(progress, requests=4, prompt=100, steps=20) -> None:
    """What one generate call reports step by step: all started after 5 steps, then pure decoding."""
    stats = GenerateStats(requests, requests * prompt)
    for step in range(1, steps + 1):
        stats.num_steps, stats.num_output_tokens, stats.elapsed_s = step, step * requests, step * 0.1
        if step == 5:
            stats.all_started_s, stats.tokens_when_all_started = 0.5, 5 * requests
        progress(0, requests, stats)


class FakePipeline:
    """The run pipeline without a model: records what each side asked for."""

    def __init__(self) -> None:
        self.calls: list[dict] = []

    def run(self, plan, backend, progress_for=None):
        config, baseline = backend.target.engine, plan.baseline
        assert os.listdir(plan.out) == [] and plan.resume is False  # a fresh folder: no baseline to reuse
        assert (plan.options.sample, plan.options.limit) == ("random", 3)
        self.calls.append({"spec": config.spec is not None, "out": plan.out, "baseline": baseline})
        evaluations = 2 if config.spec is not None and baseline == "separate" else 1
        for _ in range(evaluations):
            with progress_for() as progress:
                fake_stats(progress)
        time.sleep(0.002 if config.spec is not None else 0.001)
        lossless = {"lossless": {"verdict": "PASS"}} if config.spec is not None else {}
        return RunSummary.from_json({"verdict": "PASS", "tasks": {"gsm8k_smoke": lossless}})

    def install(self, monkeypatch) -> None:
        monkeypatch.setattr(vb, "run", self.run)
        monkeypatch.setattr(vb, "measure_limits_apart", lambda *a, **k: LIMITS)


def test_sides_interleave_each_into_a_fresh_folder(monkeypatch, tmp_path):
    fake = FakePipeline()
    fake.install(monkeypatch)
    plan = vb.VerdictBenchPlan(task="gsm8k_smoke", docs=3, rounds=2, work_dir=str(tmp_path))
    report = vb.run_verdict_bench(SPEC, plan)
    per_round = [
        {"spec": False, "baseline": "separate"},
        {"spec": True, "baseline": "separate"},
        {"spec": True, "baseline": "paired"},
    ]
    assert [{k: v for k, v in c.items() if k != "out"} for c in fake.calls] == per_round * 2
    assert len({c["out"] for c in fake.calls}) == len(fake.calls) and list(tmp_path.iterdir()) == []  # removed
    names = ["plain", "spec+separate", "spec+paired"]
    assert list(report["sides"]) == names and len(report["sides"]["plain"]["wall_s"]["per_round"]) == 2
    assert list(report["ratios"]) == [f"{n} / plain" for n in names[1:]]
    assert report["sides"]["spec+separate"]["lossless"] == ["PASS", "PASS"]
    assert report["subset"] == "a seeded random subset of 3 documents (seed 0)"
    phases = report["plain_phases"]
    assert phases["prefill_gflops"]["median"] > 0 and phases["decode_of_bandwidth"]["median"] > 0


def test_the_report_says_which_gate_failed_and_why(capsys):
    """A spec-dec side FAILs on acceptance while its lossless gate PASSes: the verdict column says FAIL, the lines
    under the ratios say which gate and why, once per reason with the rounds it held in."""
    from specdec_eval.cli.bench_print import print_verdict

    reason = "position 2 rate 0.1370 < 0.1561 = ref 0.1643 x (1 - 0.05)"
    gate = {"verdict": "FAIL", "reason": reason}
    task = {"verdict": "NO-GATE", "lossless": {"verdict": "PASS"}, "acceptance_gate": gate}
    failing = {"verdict": "FAIL", "failing_events": 0, "tasks": {"gsm8k": task}}
    passing = {"verdict": "PASS", "failing_events": 0, "tasks": {"gsm8k": {"verdict": "PASS"}}}
    assert vb.failed_gates(failing) == [f"acceptance on gsm8k: {reason}"] and vb.failed_gates(passing) == []
    events = {**passing, "verdict": "FAIL", "failing_events": 2}
    assert vb.failed_gates(events) == ["events: 2 failing event(s)"]
    from specdec_eval.results.run_summary import RunSummary

    passing_run, failing_run = RunSummary.from_json(passing), RunSummary.from_json(failing)
    assert vb.failed_gates(failing_run) == vb.failed_gates(failing)
    runs = {
        vb.PLAIN: [vb.SideRun(1.0, passing_run)] * 2,
        vb.PAIRED: [vb.SideRun(1.2, failing_run), vb.SideRun(1.3, failing_run)],
    }
    runs[vb.PLAIN][0].clocks.append(vb.PhaseClock())
    fake_stats(runs[vb.PLAIN][0].clocks[0])
    from specdec_eval.evals.bench import roofline
    from specdec_eval.workers.loading.checkpoint import load_checkpoint

    roof = roofline.Roofline(load_checkpoint("tiny").config, 4, LIMITS)
    report = vb.verdict_report(runs, roof, "subset", vb.VerdictBenchPlan(docs=3, rounds=2))
    assert report["sides"][vb.PAIRED]["failed"] == [[f"acceptance on gsm8k: {reason}"]] * 2
    assert report["sides"][vb.PLAIN]["failed"] == [[], []]
    print_verdict({**report, "model": "tiny", "kv_cache": "v1"})
    out = capsys.readouterr().out
    assert f"spec+paired FAIL (every round): acceptance on gsm8k: {reason}" in out and "plain FAIL" not in out


def test_phase_clock_splits_prefill_from_decode():
    clock = vb.PhaseClock()
    fake_stats(clock)
    p = clock.phases()
    assert (p["requests"], p["prompt_tokens"], p["output_tokens"]) == (4, 400, 80)
    assert p["prefill_s"] == 0.5 and p["decode_s"] == pytest.approx(1.5)
    assert (p["decode_tokens"], p["decode_steps"]) == (60, 15)


def test_bad_plans_are_user_errors():
    for kwargs, message in ((dict(docs=0), "--docs"), (dict(rounds=1), "--rounds"), (dict(max_output_len=0), "max")):
        with pytest.raises(UserError, match=message):
            vb.VerdictBenchPlan(**kwargs)
    with pytest.raises(UserError, match="--spec eagle3"):
        vb.run_verdict_bench(from_options(model="tiny"), vb.VerdictBenchPlan(task="gsm8k_smoke"))


@pytest.mark.slow
def test_verdict_bench_on_the_tiny_model(tmp_path):
    plan = vb.VerdictBenchPlan(
        task="gsm8k_smoke", docs=2, max_output_len=8, rounds=2, work_dir=str(tmp_path), gemm_size=64, bandwidth_mib=4
    )
    report = vb.run_verdict_bench(from_options(model="tiny", spec="eagle3", draft_len=2, device_memory="256MiB"), plan)
    assert all(len(s["wall_s"]["per_round"]) == 2 and s["wall_s"]["low"] > 0 for s in report["sides"].values())
    assert report["sides"]["spec+separate"]["lossless"] == ["PASS", "PASS"]  # its baseline ran, in its own folder
    assert report["sides"]["spec+paired"]["lossless"] == ["PASS", "PASS"]  # and from one prefill
    assert report["ratios"]["spec+separate / plain"]["median"] > 0
    assert report["plain_phases"]["prefill_gflops"]["median"] > 0
    assert list(Path(tmp_path).iterdir()) == []


def test_a_sampled_task_on_a_rejection_sampler_is_benched_as_the_run_and_its_scoring():
    """`bench --verdict --task gsm8k_sampled --spec-sampling rejection`: no baseline to decode, separate or paired;
    one spec+scored side beside the plain one. The coupled sampler and a greedy task keep the two baseline sides."""
    from specdec_eval.evals.bench.verdict_timing import _scored
    from specdec_eval.evals.run_types import EvalOptions
    from specdec_eval.evals.tasks.registry import parse_tasks
    from specdec_eval.workers.config import EngineConfig, SpecConfig

    sampled, greedy = EvalOptions(tasks=parse_tasks("gsm8k_sampled")), EvalOptions(tasks=parse_tasks("gsm8k"))
    rejection = EngineConfig(model="tiny", spec=SpecConfig(sampling="rejection"))
    assert _scored(rejection, sampled)
    assert not _scored(rejection, greedy)
    assert not _scored(EngineConfig(model="tiny", spec=SpecConfig()), sampled)
