"""The run summary as a value (results/run_summary.py): summary.json round-trips through it byte for byte,
old runs included; its verdict is derived from the gates' results and the failing events, never stored; a run no gate
could fail reads NO-GATE; and the gates return new values instead of overwriting the summary."""

from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import pytest
from specdec_eval.evals.gates.acceptance_gate import apply_acceptance_gate, evaluate_acceptance
from specdec_eval.results.run_summary import FAIL, NO_GATE, PASS, GateResult, RunSummary, TaskSummary
from specdec_eval.results.store import write_json

# summary.json of `specdec-eval run --tasks gsm8k --limit 10 --spec eagle3 --model tiny --no-reference
# --num-fewshot 2 --max-output-len 64` as main's code (b349f06, before this module) wrote it: the spec-dec run
# (lossless gate against its audited paired twin, acceptance gate without a reference) and its paired twin.
MAIN_SPEC = json.loads(
    '{"baseline":{"audit":{"audited":[{"doc_id":3,"task":"gsm8k"},{"doc_id":4,"task":"gsm8k"},{"doc_id":7'
    ',"task":"gsm8k"}],"divergences":[],"elapsed_s":9.72,"first_divergence":null,"not_auditable":0,"num_a'
    'udited":3,"planned":3,"seed":0,"sequential":true,"share":0.25},"kind":"twin","label":"paired twin, a'
    'udited on 3 of 3 planned documents","run":"20261204-182055-3863c7f6194e"},"elapsed_s":113.7,"events"'
    ':{},"failing_events":0,"kv_cache":"v1","model":"tiny","reported_acceptance":{"acceptance_length":1.0'
    '018,"acceptance_rate":0.0006,"accepted_per_position":[1,0,0],"max_draft_len":3,"note":"acceptance_le'
    'ngth includes the bonus token","num_accepted_drafts":1,"num_cycles":550,"num_draft_tokens":1650,"per'
    '_position_rate":[0.0018,0.0,0.0],"source":"engine counters"},"reused_generations":0,"run_dir":"/tmp/'
    'h26g/main/20261204-182055-c2e911b5c834","run_id":"20261204-182055-c2e911b5c834","spec":"eagle3","tas'
    'ks":{"gsm8k":{"acceptance":{"acceptance_length":1.0018,"acceptance_rate":0.0006,"accepted_per_positi'
    'on":[1,0,0],"max_draft_len":3,"note":"acceptance_length includes the bonus token","num_accepted_draf'
    'ts":1,"num_cycles":550,"num_draft_tokens":1650,"per_position_rate":[0.0018,0.0,0.0]},"acceptance_gat'
    'e":{"acceptance_length":1.0018181818181817,"band":null,"min_al":null,"per_position":[{"position":0,"'
    'rate":0.0018181818181818182,"ref":null,"verdict":"NO-REFERENCE"},{"position":1,"rate":0.0,"ref":null'
    ',"verdict":"NO-REFERENCE"},{"position":2,"rate":0.0,"ref":null,"verdict":"NO-REFERENCE"}],"reason":"'
    "no acceptance-length reference for accuracy/test_specdec.py::Testtiny::test_eagle3[v1_kv_cache-one_m"
    'odel-tp1]","ref_al":null,"rtol":0.05,"slack":0.0046,"test_id":"accuracy/test_specdec.py::Testtiny::t'
    'est_eagle3[v1_kv_cache-one_model-tp1]","verdict":"NO-REFERENCE"},"data":"local:/work/shared/data/gsm'
    '8k","filter_mismatches":[],"filter_scores":{"flexible-extract":0.0,"strict-match":0.0},"lossless":{"'
    'audit":{"first_divergence":null,"num_audited":3,"planned":3},"baseline_kind":"twin","baseline_label"'
    ':"paired twin, audited on 3 of 3 planned documents","baseline_run":"20261204-182055-3863c7f6194e","d'
    'ivergences":[],"divergent":0,"divergent_accuracy_baseline":null,"divergent_accuracy_spec":null,"iden'
    'tical":10,"identical_rate":1.0,"mcnemar_p":1.0,"num_pairs":10,"reason":"every output identical to th'
    'e baseline","verdict":"PASS"},"n_total":1319,"num_failed_requests":0,"num_samples":10,"reference":nu'
    'll,"report":"gsm8k: no reference (score only)","score":0.0,"subset":{"how":"first","n":10,"n_total":'
    '1319,"order_sha256":"f4972c7d08e0c80337aff8d177d66062c2be8a625f71e02b927f3c9aa3a2f48e","seed":null,"'
    'task":"specdec_gsm8k"},"theta":null,"threshold":null,"verdict":"REPORT"}},"test_id":"accuracy/test_s'
    'pecdec.py::Testtiny::test_eagle3[v1_kv_cache-one_model-tp1]","verdict":"PASS","world_size":1}'
)
MAIN_TWIN = json.loads(
    '{"elapsed_s":113.7,"events":{},"failing_events":0,"kv_cache":"v1","model":"tiny","paired_twin":{"aud'
    'it":{"audited":[{"doc_id":3,"task":"gsm8k"},{"doc_id":4,"task":"gsm8k"},{"doc_id":7,"task":"gsm8k"}]'
    ',"divergences":[],"elapsed_s":9.72,"first_divergence":null,"not_auditable":0,"num_audited":3,"planne'
    'd":3,"seed":0,"sequential":true,"share":0.25},"of":"20261204-182055-c2e911b5c834"},"reused_generatio'
    'ns":0,"run_dir":"/tmp/h26g/main/20261204-182055-3863c7f6194e","run_id":"20261204-182055-3863c7f6194e'
    '","spec":null,"tasks":{"gsm8k":{"acceptance":null,"data":"local:/work/shared/data/gsm8k","filter_mis'
    'matches":[],"filter_scores":{"flexible-extract":0.0,"strict-match":0.0},"n_total":1319,"num_failed_r'
    'equests":0,"num_samples":10,"reference":null,"report":"gsm8k: no reference (score only)","score":0.0'
    ',"subset":{"how":"first","n":10,"n_total":1319,"order_sha256":"f4972c7d08e0c80337aff8d177d66062c2be8'
    'a625f71e02b927f3c9aa3a2f48e","seed":null,"task":"specdec_gsm8k"},"theta":null,"threshold":null,"verd'
    'ict":"REPORT"}},"test_id":"accuracy/test_specdec.py::Testtiny::test_auto_dtype[v1_kv_cache-tp1]","ve'
    'rdict":"PASS","world_size":1}'
)
# A summary as the first pipeline wrote it: no n_total, no subset, a lossless record without the
# baseline's kind; a failing event; and a key no version of this module knows.
OLD = {
    "verdict": "FAIL",
    "elapsed_s": 3.0,
    "events": {"spec_state_leak": 1},
    "failing_events": 1,
    "kv_cache": "v2",
    "model": "tiny",
    "spec": "eagle3",
    "world_size": 1,
    "future_field": {"x": 1},
    "tasks": {
        "gsm8k_smoke": {
            "num_samples": 2,
            "score": 50.0,
            "filter_scores": {"strict-match": 50.0},
            "reference": None,
            "threshold": None,
            "theta": None,
            "verdict": "REPORT",
            "num_failed_requests": 0,
            "acceptance": None,
            "data": "smoke",
            "report": "r",
            "filter_mismatches": [],
            "lossless": {"num_pairs": 2, "identical": 2, "verdict": "PASS", "reason": "same"},
            "acceptance_gate": {"verdict": "PASS", "acceptance_length": 2.1},
        }
    },
}


def _written(summary: dict, path) -> bytes:
    write_json(path, summary)
    return path.read_bytes()


@pytest.mark.parametrize("recorded", [MAIN_SPEC, MAIN_TWIN, OLD], ids=["main-spec", "main-twin", "issue16"])
def test_summary_json_round_trips_byte_for_byte(tmp_path, recorded):
    summary = RunSummary.from_json(recorded)
    assert summary.to_json() == recorded
    assert _written(summary.to_json(), tmp_path / "a.json") == _written(recorded, tmp_path / "b.json")
    assert summary.verdict == recorded["verdict"]  # derived, and what the old writer recorded


def test_typed_fields_of_a_main_summary():
    summary = RunSummary.from_json(MAIN_SPEC)
    task = summary.tasks["gsm8k"]
    verdicts = (task.verdict, task.gates["lossless"].verdict, task.gates["acceptance_gate"].verdict)
    assert verdicts == ("REPORT", PASS, "NO-REFERENCE") and task.num_samples == 10
    assert (
        task.gates["lossless"].numbers["identical"] == 10 and task.gates["lossless"].numbers["baseline_kind"] == "twin"
    )
    assert task.gates_passed() == ["lossless"] and summary.shown_verdict == PASS
    assert summary.baseline["kind"] == "twin" and summary.failing_events == 0


def _task(verdict: str = "REPORT", **gates: GateResult) -> TaskSummary:
    return TaskSummary(verdict=verdict, score=40.0, num_samples=10, gates=gates)


def test_the_verdict_is_derived_from_the_gates():
    passing = RunSummary(tasks={"gsm8k": _task("PASS")})
    assert passing.verdict == PASS and passing.to_json()["verdict"] == PASS
    failed = passing.with_task_gate("gsm8k", "lossless", GateResult(FAIL, "3 of 10 differ", {"divergent": 3}))
    assert failed.verdict == FAIL and failed.to_json()["verdict"] == FAIL
    recorded = failed.to_json()["tasks"]["gsm8k"]["lossless"]
    assert recorded == {"divergent": 3, "verdict": FAIL, "reason": "3 of 10 differ"}
    assert passing.verdict == PASS  # a value: the gate made a new summary
    assert RunSummary(tasks={"gsm8k": _task("FAIL"), "gpqa": _task("PASS")}).verdict == FAIL


def test_a_failing_event_fails_a_run_every_gate_passed():
    clean = RunSummary(tasks={"gsm8k": _task("PASS", lossless=GateResult(PASS))}, events={"fault_injected": 1})
    assert clean.verdict == PASS
    leaked = dataclasses.replace(clean, events={"spec_state_leak": 1}, failing_events=1)
    assert leaked.verdict == FAIL and leaked.shown_verdict == FAIL and leaked.to_json()["verdict"] == FAIL
    assert RunSummary.from_json(leaked.to_json()).verdict == FAIL


def test_no_gate_when_no_gate_could_fail():
    ungated = RunSummary(tasks={"gsm8k": _task("REPORT"), "gpqa": _task("NO-GATE")})
    assert ungated.verdict == PASS and ungated.shown_verdict == NO_GATE
    assert ungated.to_json()["verdict"] == PASS  # summary.json keeps recording PASS, as it always did
    no_baseline = ungated.with_task_gate("gsm8k", "lossless", GateResult("NO-BASELINE", "no finished baseline"))
    assert no_baseline.shown_verdict == NO_GATE
    gated = ungated.with_task_gate("gsm8k", "acceptance_gate", GateResult(PASS, "AL within band"))
    assert gated.shown_verdict == PASS and gated.tasks["gsm8k"].gates_passed() == ["acceptance"]


def test_a_recorded_fail_stays_fail_and_a_stale_pass_does_not_hide_a_gate_fail():
    unexplained = {**MAIN_TWIN, "verdict": FAIL}  # an older writer's reason this reader cannot see
    assert RunSummary.from_json(unexplained).verdict == FAIL
    spec_task = MAIN_SPEC["tasks"]["gsm8k"]
    task = {**spec_task, "lossless": {**spec_task["lossless"], "verdict": FAIL}}
    stale = {**MAIN_SPEC, "tasks": {"gsm8k": task}}  # says PASS over a FAILed gate
    assert RunSummary.from_json(stale).verdict == FAIL


def test_the_summary_is_frozen():
    summary = RunSummary.from_json(MAIN_SPEC)
    with pytest.raises(dataclasses.FrozenInstanceError):
        summary.failing_events = 0  # type: ignore[misc]
    with pytest.raises(TypeError):
        summary.tasks["gsm8k"] = _task()  # type: ignore[index]
    with pytest.raises(TypeError):
        summary.tasks["gsm8k"].gates["lossless"].numbers["identical"] = 0  # type: ignore[index]


REF = "accuracy/test_specdec.py::Testtiny::test_eagle3[v2_kv_cache-one_model-tp1]"


def test_the_acceptance_gate_returns_results_and_its_fail_fails_the_run():
    counts = {"num_cycles": 1000, "num_accepted_drafts": 20, "accepted_per_position": [], "max_draft_len": 3}
    result = SimpleNamespace(task="gsm8k", acceptance=counts, acceptance_requests=[])
    refs = {REF: {"ref_al": 2.0, "min_al": 1.9, "max_draft_len": 3}}
    gates = evaluate_acceptance([result], REF, refs, 0.05)
    assert gates["gsm8k"].verdict == FAIL and "collapse tripwire" in gates["gsm8k"].reason
    before = RunSummary(tasks={"gsm8k": _task("PASS")})
    after = apply_acceptance_gate(before, [result], REF, refs, 0.05)
    assert before.verdict == PASS and after.verdict == FAIL
    assert after.to_json()["tasks"]["gsm8k"]["acceptance_gate"]["verdict"] == FAIL
    other = {REF: {**refs[REF], "task": "gpqa_diamond"}}  # an entry for another task leaves this one ungated
    assert apply_acceptance_gate(before, [result], REF, other, 0.05) == before
