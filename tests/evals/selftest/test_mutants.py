"""The bug-class matrix (`selftest --mutants`, evals/selftest/mutants.py): every class is caught by the default paired
run on the tiny model by the gate that must catch it, the unmutated engine passes every gate, and a class that is not
really planted is reported MISSED (exit 1)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from specdec_eval.evals.run_types import EvalOptions
from specdec_eval.evals.selftest import mutants
from specdec_eval.evals.selftest.mutants import (
    BUG_CLASSES,
    CLEAN,
    CLEAN_REJECTION,
    CLEAN_SAMPLED,
    judge,
    run_matrix,
    select_classes,
)
from specdec_eval.evals.tasks.registry import TASKS
from specdec_eval.results.sample_record import SampleRecord
from specdec_eval.workers.engine_options import from_options
from specdec_eval.workers.faults import REJECTION_POINTS
from specdec_eval.workers.planted.verifier import PlantedVerifier

from specdec_eval.errors import UserError

from ...cli.test_run_cli import SHARED_DATA, needs_shared_data
from ...cli_helpers import run_cli

# The default run, made small: 2 documents of a seeded random subset, 0 shots, 16 tokens (every class shows there).
TINY = from_options(model="tiny", device="cpu", device_memory="256MiB", spec="eagle3", kv_cache="v2")
OPTIONS = EvalOptions(
    tasks=[TASKS["gsm8k"]], data_dir=str(SHARED_DATA), limit=2, max_output_len=16, num_fewshot=0, no_reference=True
)


# The rejection sampler's classes are judged in distribution: their power is the simulation's (evals/lossless/
# simulate.py power); on tiny (near-uniform distributions, almost no draft accepted) only the greedy one shows.
COUPLED = [b for b in BUG_CLASSES if b.spec_sampling == "coupled"]
SAMPLED_OPTIONS = replace(OPTIONS, tasks=[TASKS["gsm8k_sampled"]], max_output_len=32)


def _row(bug, tmp_path) -> dict:
    (row,) = run_matrix(TINY, OPTIONS, [bug], workdir=str(tmp_path))["rows"]
    return row


# The quiet class lowers acceptance, and tiny's head is random (it accepts next to nothing either way): its row is
# checked from recorded numbers below, and end to end on SmolLM2 (`selftest --mutants --only aux_layers_off_by_one`).
ON_TINY = [b for b in COUPLED if b.catcher != mutants.PAIRED]


@needs_shared_data
@pytest.mark.parametrize("bug", ON_TINY, ids=[b.name for b in ON_TINY])
def test_each_bug_class_is_caught_by_the_default_paired_run_on_tiny(tmp_path, bug):
    row = _row(bug, tmp_path)
    assert row["result"] == "caught", row
    cell = row["cells"][bug.catcher]
    assert cell["verdict"] == "FAIL" and 1 <= cell["doc"] <= 2 and cell["seconds"] > 0
    assert row["fired_in_steps"] >= 1 and not row["never_fired"]
    if bug.catcher == "lossless":  # a class that changes outputs: no request failed, the outputs did change
        assert row["cells"]["events"]["verdict"] == "PASS"
    assert list(tmp_path.iterdir()) == []  # each class ran in a fresh runs folder, removed after


@needs_shared_data
def test_the_unmutated_tiny_run_passes_every_gate(tmp_path):
    report = run_matrix(TINY, OPTIONS, [CLEAN, CLEAN_SAMPLED], workdir=str(tmp_path))
    assert report["ok"] and [r["result"] for r in report["rows"]] == ["PASS", "PASS"]
    greedy, sampled = report["rows"]
    assert greedy["cells"]["lossless"] == {"verdict": "PASS"} and greedy["cells"]["events"] == {"verdict": "PASS"}
    assert sampled["cells"]["events"] == {"verdict": "PASS"} and greedy["fired_in_steps"] == 0


@needs_shared_data
def test_a_class_that_is_not_really_planted_is_missed(tmp_path, monkeypatch):
    """The matrix's own check: with accept_off_by_one's hook made harmless, the class must show MISSED."""
    monkeypatch.setattr(PlantedVerifier, "_accept_one_more", lambda self, items, logits, emitted, step: emitted)
    (bug,) = [b for b in BUG_CLASSES if b.name == "accept_off_by_one"]
    report = run_matrix(TINY, OPTIONS, [bug], workdir=str(tmp_path))
    assert not report["ok"] and report["rows"][0]["result"] == "MISSED"
    assert report["rows"][0]["cells"]["lossless"] == {"verdict": "PASS"}


def _summary(lossless="PASS", acceptance=None, failing=0, stopped=None) -> dict:
    task = {
        "verdict": "NO-GATE",
        "num_samples": 4,
        "lossless": {"verdict": lossless, "divergences": []},
        "report": "",
        **({"acceptance_gate": {"verdict": acceptance, "reason": "AL 1.16"}} if acceptance else {}),
        **({"stopped": stopped} if stopped else {}),
    }
    return {"tasks": {"gsm8k": task}, "events": {}, "failing_events": failing}


def test_judge_counts_only_the_catcher_and_flags_a_false_fail():
    (bug,) = [b for b in BUG_CLASSES if b.name == "draft_kv_into_target"]
    lucky = judge(bug, _summary(acceptance="FAIL"), 12.0, [])  # acceptance collapsed, lossless said identical
    assert lucky["result"] == "MISSED" and lucky["cells"]["acceptance"]["verdict"] == "FAIL"
    caught = judge(bug, _summary("FAIL", stopped={"gate": "lossless", "verdict": "FAIL", "n": 3}), 12.0, [])
    assert caught["result"] == "caught" and caught["cells"]["lossless"]["doc"] == 3
    assert judge(CLEAN, _summary(), 5.0, [])["result"] == "PASS"
    assert judge(CLEAN, _summary(failing=1), 5.0, [])["result"] == "FALSE FAIL"
    assert judge(CLEAN, _summary("NO-GATE"), 5.0, [])["cells"]["lossless"] == {"verdict": "-"}


def test_the_quiet_class_is_caught_only_by_pairing_with_the_unmutated_run():
    """aux_layers_off_by_one changes no output: the lossless gate passes, the single-run acceptance gate passes
    within its band (MISSED, with the gate's own statement), and the paired test against the unmutated run's
    per-document acceptance FAILs it."""
    (bug,) = [b for b in BUG_CLASSES if b.name == "aux_layers_off_by_one"]
    assert bug.catcher == mutants.PAIRED and bug.inject == ("aux_layers_off_by_one",)
    unmutated = [_sample(d, 40, 40) for d in range(10)]
    dropped = [_sample(d, 42, 36 + d % 3) for d in range(10)]  # same outputs, ~7 % lower AL on every document
    cell = mutants.paired_cell(unmutated, dropped, 30.0)
    assert cell["verdict"] == "FAIL" and cell["doc"] == 10 and cell["reason"].startswith("DROP")
    row = judge(bug, _summary(acceptance="PASS"), 30.0, [], cell)
    assert row["result"] == "caught" and row["cells"]["acceptance"]["verdict"] == "PASS"
    assert (
        judge(bug, _summary(acceptance="PASS"), 30.0, [], mutants.paired_cell(unmutated, unmutated, 1.0))["result"]
        == "MISSED"
    )
    assert mutants.paired_cell(None, dropped, 1.0) == {"verdict": "-"}
    assert judge(CLEAN, _summary(), 5.0, [])["cells"][mutants.PAIRED] == {"verdict": "-"}


def _sample(doc: int, cycles: int, accepted: int) -> SampleRecord:
    return SampleRecord(
        "gsm8k",
        doc,
        prompt_hash=f"p{doc}",
        acceptance_length=1 + accepted / cycles,
        acceptance={"num_cycles": cycles, "num_accepted_drafts": accepted},
    )


def test_judge_names_the_first_divergent_document_in_the_evaluation_order():
    (bug,) = [b for b in BUG_CLASSES if b.name == "accept_off_by_one"]
    summary = _summary("FAIL")
    summary["tasks"]["gsm8k"]["lossless"]["divergences"] = [{"doc_id": 7}, {"doc_id": 3}]
    assert judge(bug, summary, 1.0, [5, 3, 9, 7])["cells"]["lossless"]["doc"] == 2


def test_select_classes():
    assert [b.name for b in select_classes(None)][:2] == ["unmutated", "unmutated, sampled"]
    assert [b.name for b in select_classes(["accept_off_by_one"])] == ["unmutated", "accept_off_by_one"]
    assert [b.name for b in select_classes(["sample_key_shift,rewind_keeps_rejected"])] == [
        "unmutated",
        "unmutated, sampled",
        "rewind_keeps_rejected",
        "sample_key_shift",
    ]
    with pytest.raises(UserError, match="unknown bug class nope"):
        select_classes(["nope"])


def test_the_sampled_classes_of_the_rejection_sampler_run_beside_an_unmutated_rejection_sampled_run():
    """Each planted bug of the rejection path is a live class of the matrix when asked for (`--only`), on the
    rejection sampler, beside an unmutated run of that sampler (judged in distribution: it must PASS)."""
    rejection = [b for b in BUG_CLASSES if b.spec_sampling == "rejection"]
    assert {b.name for b in rejection} == set(REJECTION_POINTS)
    assert all(b.sampled and b.catcher == "lossless" for b in rejection)
    assert select_classes(["rejection_greedy"]) == [CLEAN, CLEAN_REJECTION, rejection[0]]
    assert CLEAN_REJECTION not in select_classes(["sample_key_shift"])
    assert not set(REJECTION_POINTS) & {b.name for b in select_classes(None)}  # asked for, not by default
    config = mutants.mutant_config(TINY, rejection[0])
    assert config.spec.sampling == "rejection" and config.inject == ("rejection_greedy",)


@pytest.mark.slow
@needs_shared_data
def test_a_greedy_rejection_sampler_is_caught_in_distribution_and_the_unmutated_one_passes(tmp_path):
    (greedy,) = [b for b in BUG_CLASSES if b.name == "rejection_greedy"]
    report = run_matrix(TINY, SAMPLED_OPTIONS, [CLEAN_REJECTION, greedy], workdir=str(tmp_path))
    clean, caught = report["rows"]
    assert report["ok"] and (clean["result"], caught["result"]) == ("PASS", "caught"), report
    assert clean["cells"]["lossless"] == {"verdict": "PASS"}
    assert "not draws from the target's sampling distribution" in caught["cells"]["lossless"]["reason"]


REPORT = {
    "ok": False,
    "model": "tiny",
    "limit": 2,
    "gates": list(mutants.GATES),
    "rows": [
        {
            "class": "unmutated",
            "what": "",
            "catcher": None,
            "result": "PASS",
            "elapsed_s": 4.0,
            "documents": 2,
            "of": 2,
            "cells": {
                "accuracy": {"verdict": "-"},
                "lossless": {"verdict": "PASS"},
                "acceptance": {"verdict": "-"},
                "paired_acceptance": {"verdict": "-"},
                "events": {"verdict": "PASS"},
            },
            "fired_in_steps": 0,
            "never_fired": [],
        },
        {
            "class": "accept_off_by_one",
            "what": "",
            "catcher": "lossless",
            "result": "caught",
            "elapsed_s": 3.0,
            "documents": 2,
            "of": 2,
            "cells": {
                "accuracy": {"verdict": "-"},
                "lossless": {"verdict": "FAIL", "doc": 1, "seconds": 3.0},
                "acceptance": {"verdict": "-"},
                "paired_acceptance": {"verdict": "-"},
                "events": {"verdict": "PASS"},
            },
            "fired_in_steps": 9,
            "never_fired": [],
        },
        {
            "class": "spec_alters_target",
            "what": "",
            "catcher": "lossless",
            "result": "MISSED",
            "elapsed_s": 3.0,
            "documents": 2,
            "of": 2,
            "cells": {
                "accuracy": {"verdict": "-"},
                "lossless": {"verdict": "PASS"},
                "acceptance": {"verdict": "FAIL", "doc": 2, "seconds": 3.0},
                "paired_acceptance": {"verdict": "-"},
                "events": {"verdict": "PASS"},
            },
            "fired_in_steps": 9,
            "never_fired": [],
        },
        {
            "class": "aux_layers_off_by_one",
            "what": "",
            "catcher": "paired_acceptance",
            "result": "caught",
            "elapsed_s": 50.0,
            "documents": 10,
            "of": 10,
            "cells": {
                "accuracy": {"verdict": "-"},
                "lossless": {"verdict": "PASS"},
                "acceptance": {"verdict": "PASS", "power": "at 10 documents it detects 16%"},
                "paired_acceptance": {"verdict": "FAIL", "doc": 10, "seconds": 50.0, "reason": "DROP: AL -4.9 %"},
                "events": {"verdict": "PASS"},
            },
            "fired_in_steps": 99,
            "never_fired": [],
        },
    ],
}


def test_cli_prints_the_matrix_and_exits_1_on_a_missed_class(capsys, monkeypatch):
    seen = {}

    def fake(config, options, classes, note=None, workdir=None):
        seen.update(model=config.model, limit=options.limit, classes=[b.name for b in classes])
        return REPORT

    monkeypatch.setattr(mutants, "run_matrix", fake)
    code, out, _ = run_cli(
        capsys,
        "selftest",
        "--mutants",
        "--model",
        "tiny",
        "--limit",
        "2",
        "--data-dir",
        str(SHARED_DATA),
        "--only",
        "accept_off_by_one,spec_alters_target",
    )
    assert code == 1 and seen == {
        "model": "tiny",
        "limit": 2,
        "classes": ["unmutated", "spec_alters_target", "accept_off_by_one"],
    }
    lines = out.splitlines()
    assert lines[0].split() == [
        "bug",
        "class",
        "accuracy",
        "lossless",
        "acceptance",
        "paired_acceptance",
        "events",
        "result",
    ]
    assert "caught at doc 1 after 3 s*" in lines[2] and "MISSED*" in lines[3] and "caught at doc 2" in lines[3]
    quiet = lines[4]  # missed by the single-run gate (stated), caught by pairing with the unmutated run
    assert (
        quiet.split()[:4] == ["aux_layers_off_by_one", "-", "MISSED", "MISSED"]
        and "caught at doc 10 after 50 s*" in quiet
    )
    assert "aux_layers_off_by_one: the single-run acceptance gate at this n: at 10 documents it detects 16%" in out
    assert "paired with the unmutated run: DROP: AL -4.9 %" in out
    assert "selftest --mutants FAILED" in out and "not as expected: spec_alters_target" in out
    code, out, _ = run_cli(capsys, "selftest", "--mutants", "--model", "tiny", "--data-dir", str(SHARED_DATA), "--json")
    assert code == 1 and json.loads(out) == REPORT


def test_cli_refuses_an_unknown_class_in_one_line(capsys):
    code, _, err = run_cli(
        capsys, "selftest", "--mutants", "--model", "tiny", "--data-dir", str(SHARED_DATA), "--only", "nope"
    )
    assert code == 2 and "unknown bug class nope" in err and "Traceback" not in err


def test_gen_kwargs_shape_only_the_sampled_classes_runs():
    base = EvalOptions(tasks=[TASKS["gsm8k"]], limit=4, gen_kwargs="temperature=1.0,top_k=20,top_p=0.9")
    by_name = {b.name: b for b in mutants.BUG_CLASSES}
    sampled = mutants.matrix_options(base, by_name["spec_filter_order"])
    greedy = mutants.matrix_options(base, by_name["accept_off_by_one"])
    conditions = sampled.conditions_for(sampled.tasks[0])
    assert (conditions.temperature, conditions.top_k, conditions.top_p) == (1.0, 20, 0.9)
    assert greedy.gen_kwargs is None and greedy.conditions_for(greedy.tasks[0]).greedy
