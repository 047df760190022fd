"""The gates as one protocol over one registry: every gate declares a name and a key of its own, the run is judged in
the registry's order, an opt-in gate judges only the runs that ask for it (so no other verdict changes), and a gate
recorded under any key loads back from summary.json and fails the run."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest
from specdec_eval.evals.gates.gate import RunEvidence
from specdec_eval.evals.gates.registry import gate_keys, gates, judge_run, parse_opt_in
from specdec_eval.evals.gates.resolved_run import DecodingKind, ResolvedRun, decoding_kind
from specdec_eval.evals.lossless.baseline import NO_LOSSLESS_GATE
from specdec_eval.evals.run_types import EvalOptions, RunPlan
from specdec_eval.evals.tasks.registry import parse_tasks
from specdec_eval.results.run_summary import FAIL, NO_GATE, PASS, GateResult, RunSummary, TaskSummary
from specdec_eval.results.sample_record import SampleRecord
from specdec_eval.workers.interface import EngineIdentity

from specdec_eval.errors import UserError


@pytest.fixture(autouse=True)
def _collect_engines():
    """Overrides conftest's per-test gc.collect: no engines are built here."""
    yield


PLAIN = EngineIdentity("local", "tiny", None, 0, "v1", "auto", "float32", 1, 1, {})


def _run(opt_in=None, identity=PLAIN) -> ResolvedRun:
    plan = RunPlan(EvalOptions(tasks=parse_tasks("gsm8k_smoke"), no_reference=True))
    return ResolvedRun(identity, "t::id", plan, NO_LOSSLESS_GATE, None, {}, opt_in or {})


def _evidence(finish_reasons: list[str]) -> tuple[RunSummary, RunEvidence]:
    samples = tuple(SampleRecord("gsm8k_smoke", i, finish_reason=f) for i, f in enumerate(finish_reasons))
    accuracy = GateResult("REPORT", "gsm8k_smoke: no reference (score only)", {})
    result = SimpleNamespace(task="gsm8k_smoke", accuracy=accuracy, samples=list(samples))
    summary = RunSummary(tasks={"gsm8k_smoke": TaskSummary(num_samples=len(samples))})
    return summary, RunEvidence((result,), samples, summary)


def test_each_gate_has_a_name_and_a_key_of_its_own():
    names = [g.name for g in gates()]
    keys = [g.key for g in gates() if g.key is not None]
    assert len(set(names)) == len(names) and len(set(keys)) == len(keys)
    assert names[:3] == ["accuracy", "lossless", "acceptance"]  # the order a run is judged in
    assert gate_keys()["acceptance_gate"] == "acceptance"  # the key old run folders keep it under


def test_a_plain_run_is_judged_by_its_accuracy_test_only():
    summary, evidence = _evidence(["length", "length"])
    judged = judge_run(summary, evidence, _run())
    task = judged.tasks["gsm8k_smoke"]
    assert task.verdict == "REPORT" and task.report.endswith("(score only)") and dict(task.gates) == {}
    assert judged.to_json()["tasks"]["gsm8k_smoke"]["verdict"] == "REPORT"


def test_an_opt_in_gate_judges_only_runs_that_ask_for_it():
    """Every output cut off: asked for, the truncated gate FAILs the run; not asked for, nothing changes."""
    summary, evidence = _evidence(["length"] * 3 + ["stop"])
    unasked = judge_run(summary, evidence, _run())
    assert "truncated" not in unasked.to_json()["tasks"]["gsm8k_smoke"]
    asked = judge_run(summary, evidence, _run({"truncated": "0.5"}))
    gate = asked.tasks["gsm8k_smoke"].gates["truncated"]
    assert gate.verdict == FAIL and "3 of 4 outputs (75.0 %)" in gate.reason
    assert unasked.verdict == PASS and asked.verdict == FAIL


def test_a_gate_under_any_key_loads_back_and_fails_the_run():
    summary, evidence = _evidence(["length"] * 4)
    record = judge_run(summary, evidence, _run({"truncated": None})).to_json()
    loaded = RunSummary.from_json(record)
    assert loaded.tasks["gsm8k_smoke"].gates["truncated"].failed and loaded.verdict == FAIL
    assert loaded.to_json() == record
    # a record with no verdict is no gate's (a task entry's other mappings: conditions, clustered)
    other = RunSummary.from_json({"tasks": {"t": {"verdict": "PASS", "conditions": {"temperature": 0}}}})
    assert dict(other.tasks["t"].gates) == {} and other.verdict == PASS


def test_opt_in_settings_are_checked_with_one_line():
    assert parse_opt_in(["truncated"]) == {"truncated": None}
    assert parse_opt_in(["truncated=0.25"]) == {"truncated": "0.25"}
    with pytest.raises(UserError, match="no opt-in gate 'lossless'; known: truncated"):
        parse_opt_in(["lossless"])  # a gate every spec-dec run has is no opt-in
    for bad in ("truncated=2", "truncated=x", "truncated=-0.1"):
        with pytest.raises(UserError, match="SHARE is a fraction from 0 to 1"):
            parse_opt_in([bad])


def test_truncated_share_at_the_limit_passes_above_it_fails():
    from specdec_eval.evals.gates.truncated import judge_share

    assert judge_share(1, 4, 0.25).verdict == PASS  # exactly the share allowed
    assert judge_share(2, 4, 0.25).verdict == FAIL
    assert judge_share(0, 4, 0.0).verdict == PASS
    assert judge_share(0, 0, 0.5).verdict == NO_GATE  # every request failed: the accuracy gate's FAIL, not this


def test_failed_requests_are_not_counted_as_cut_off():
    summary, evidence = _evidence(["error", "error", "error", "stop"])
    gate = judge_run(summary, evidence, _run({"truncated": "0"})).tasks["gsm8k_smoke"].gates["truncated"]
    assert gate.verdict == PASS and gate.numbers["answered"] == 1


def test_decoding_kind_is_resolved_from_the_conditions_and_the_sampler():
    assert decoding_kind({"temperature": 0.0}, "rejection") is DecodingKind.GREEDY
    assert decoding_kind(None, None) is DecodingKind.GREEDY
    assert decoding_kind({"temperature": 0.7}, None) is DecodingKind.PLAIN_SAMPLED
    assert decoding_kind({"temperature": 0.7}, "coupled") is DecodingKind.COUPLED
    assert decoding_kind({"temperature": 0.7}, "rejection") is DecodingKind.REJECTION_SAMPLED
    assert decoding_kind({"temperature": 1.0}, "server") is DecodingKind.ENDPOINT_SAMPLED
    kinds = [k for k in DecodingKind if k.in_distribution]
    assert kinds == [DecodingKind.REJECTION_SAMPLED, DecodingKind.ENDPOINT_SAMPLED]


def test_the_spec_dec_gates_apply_only_to_a_spec_dec_run():
    spec = replace(PLAIN, spec="eagle3", max_draft_len=3)
    applying = {g.name for g in gates() if g.applies(_run(identity=spec))}
    assert applying == {"accuracy", "lossless", "acceptance"}
    assert {g.name for g in gates() if g.applies(_run())} == {"accuracy"}
