"""`bench --verdict --endpoint`: four sides against two servers, interleaved; the ratios to the plain runs and the
guards of a verdict's cost (a sampled verdict within 1.4x its plain run, a paired one within 1.45x). The runs are
faked here (their wall times chosen); the sides' targets are checked as built."""

from __future__ import annotations

import pytest
from specdec_eval.cli.bench_print import print_endpoint_verdict
from specdec_eval.evals.bench import endpoint_verdict as ev
from specdec_eval.evals.bench.verdict_timing import GUARDS, SideRun, VerdictBenchPlan, guards
from specdec_eval.peers.client.options import EndpointOptions
from specdec_eval.workers.config import EngineConfig, SpecConfig

from specdec_eval.errors import UserError

SPEC = EngineConfig(model="tiny", spec=SpecConfig())
SERVERS = EndpointOptions(endpoint="http://127.0.0.1:9001", baseline_endpoint="http://127.0.0.1:9000")
WALLS = {ev.PLAIN: [10.0, 12.0], ev.SPEC: [20.0, 23.0], ev.PLAIN_SAMPLED: [10.0, 11.0], ev.SAMPLED: [13.0, 16.0]}


class _Summary(dict):
    verdict = "PASS"


@pytest.fixture
def faked(monkeypatch):
    calls = []

    def run_side(target, options, baseline, work_dir, progress_for=None):
        calls.append((target, options, baseline))
        name = {0: ev.PLAIN, 1: ev.SPEC, 2: ev.PLAIN_SAMPLED, 3: ev.SAMPLED}[(len(calls) - 1) % 4]
        wall = WALLS[name][(len(calls) - 1) // 4]
        return SideRun(wall, _Summary(tasks={}, verdict="PASS"))

    monkeypatch.setattr(ev, "run_side", run_side)
    monkeypatch.setattr(ev, "source_for", lambda task, data_dir: None)
    return calls


def test_four_sides_on_the_right_servers_with_ratios_and_guards(faked):
    report = ev.run_endpoint_verdict_bench(SPEC, SERVERS, VerdictBenchPlan(docs=4, rounds=2))
    plain, spec, plain_sampled, sampled = faked[:4]
    assert plain[0].engine.spec is None and plain[0].endpoint.endpoint == SERVERS.baseline_endpoint
    assert plain[0].endpoint.baseline_endpoint is None
    assert spec[0].endpoint == SERVERS and spec[0].engine.spec is not None
    assert sampled[0].engine.spec.sampling == "rejection"  # judged in distribution: scored, not decoded
    assert [t.name for t in plain[1].tasks] == ["gsm8k"] and [t.name for t in sampled[1].tasks] == ["gsm8k_sampled"]
    assert plain_sampled[1].tasks == sampled[1].tasks and plain_sampled[0] is plain[0]
    ratios = report["ratios"]
    assert ratios[f"{ev.SPEC} / {ev.PLAIN}"]["per_round"] == [2.0, round(23 / 12, 3)]
    assert ratios[f"{ev.SAMPLED} / {ev.PLAIN_SAMPLED}"]["per_round"] == [1.3, round(16 / 11, 3)]
    guard = report["guards"][f"{ev.SAMPLED} / {ev.PLAIN_SAMPLED}"]
    assert guard == {"limit": 1.4, "median": ratios[f"{ev.SAMPLED} / {ev.PLAIN_SAMPLED}"]["median"], "within": True}
    text = "\n".join(print_endpoint_verdict(report))
    assert (
        "spec+baseline server / plain" in text and "guard spec+scored, sampled / plain, sampled: 1.38x within" in text
    )


def test_guards_say_over_when_a_verdict_costs_too_much():
    ratios = {"spec+paired / plain": {"median": 1.5}, "spec+scored / plain": {"median": 1.39}}
    found = guards(ratios)
    assert found["spec+paired / plain"]["within"] is False and found["spec+scored / plain"]["within"] is True
    assert GUARDS["spec+paired"] == ("plain", 1.45)


def test_a_baseline_server_is_needed(faked):
    with pytest.raises(UserError, match="--baseline-endpoint"):
        ev.run_endpoint_verdict_bench(SPEC, EndpointOptions(endpoint="http://x:1"), VerdictBenchPlan(docs=4))
