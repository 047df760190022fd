"""The losslessness gate: spec-dec outputs against the non-speculative baseline, sample by sample."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from specdec_eval.evals.gates.references import lookup
from specdec_eval.evals.lossless.check import lossless_check
from specdec_eval.results.sample_record import SampleRecord
from specdec_eval.results.store import list_runs

CLI = [sys.executable, "-m", "specdec_eval.cli.main"]
DATA = str(Path(__file__).resolve().parents[4] / "shared" / "data")


def _sample(doc: int, ids: list[int], correct: bool = False, task: str = "gsm8k") -> SampleRecord:
    return SampleRecord(
        task,
        doc,
        prompt_hash=f"p{doc}",
        output_token_ids=ids,
        correct={"strict-match": correct, "flexible-extract": correct},
    )


def test_identical_outputs_pass_and_any_fp32_divergence_fails_naming_the_sample():
    base = [_sample(0, [1, 2, 3]), _sample(1, [4, 5], True), _sample(2, [6])]
    same = lossless_check(list(base), base, "float32")["gsm8k"].record()
    assert (same["verdict"], same["identical"], same["identical_rate"]) == ("PASS", 3, 1.0)
    spec = [_sample(0, [1, 2, 3]), _sample(1, [4, 9], False), _sample(2, [6, 7])]
    out = lossless_check(spec, base, "float32")["gsm8k"].record()
    assert out["verdict"] == "FAIL" and out["divergent"] == 2
    assert out["divergences"] == [
        {"doc_id": 1, "position": 1, "spec": 0.0, "baseline": 1.0},
        {"doc_id": 2, "position": 1, "spec": 0.0, "baseline": 0.0},
    ]
    assert out["divergent_accuracy_spec"] == 0.0 and out["divergent_accuracy_baseline"] == 50.0
    assert out["mcnemar_p"] == 1.0  # one discordant pair cannot be significant


def test_several_samples_of_a_document_pair_by_repeat():
    """`--repeats 2` at T > 0: each document's samples differ from each other, and sample r must meet the baseline's
    sample r (paired by document alone, every second sample met the other repeat and 4 of 8 'diverged')."""
    from dataclasses import replace

    base = [replace(_sample(d, [d, r + 10]), repeat=r) for d in range(4) for r in range(2)]
    same = lossless_check([replace(s) for s in base], base, "float32")["gsm8k"].record()
    assert (same["verdict"], same["num_pairs"], same["identical"]) == ("PASS", 8, 8)
    spec = [replace(s, output_token_ids=[s.doc_id, 99]) if (s.doc_id, s.repeat) == (2, 1) else s for s in base]
    out = lossless_check(spec, base, "float32")["gsm8k"].record()
    assert out["verdict"] == "FAIL" and out["divergences"] == [
        {"doc_id": 2, "repeat": 1, "position": 1, "spec": 0.0, "baseline": 0.0}
    ]


def test_bf16_needs_a_calibrated_tolerance():
    base = [_sample(i, [i, i]) for i in range(100)]
    spec = [_sample(i, [i, i + (i < 3)]) for i in range(100)]  # 3 of 100 differ
    assert lossless_check(spec, base, "bfloat16")["gsm8k"].record()["verdict"] == "UNCALIBRATED"
    assert lossless_check(spec, base, "bfloat16", tolerance=0.05)["gsm8k"].record()["verdict"] == "PASS"
    assert lossless_check(spec, base, "bfloat16", tolerance=0.01)["gsm8k"].record()["verdict"] == "FAIL"


def test_different_prompts_are_not_comparable():
    base = [_sample(0, [1])]
    spec = [_sample(0, [1]).replace(prompt_hash="other")]
    out = lossless_check(spec, base, "float32")["gsm8k"].record()
    assert out["verdict"] == "FAIL" and "different prompts" in out["reason"]


def _run(out: Path, *args: str) -> tuple[int, dict]:
    p = subprocess.run(CLI + ["run", "--out", str(out), "--json", *args], capture_output=True, text=True, timeout=900)
    assert p.returncode in (0, 1), p.stderr[-2000:]
    return p.returncode, json.loads(p.stdout)


TINY = [
    "--model",
    "tiny",
    "--tasks",
    "gsm8k_smoke",
    "--limit",
    "4",
    "--max-output-len",
    "24",
    "--no-reference",
    "--device-memory",
    "256MiB",
    "--spec",
    "eagle3",
]


def test_spec_run_gets_a_baseline_and_the_deliberate_bug_fails_only_the_lossless_gate(tmp_path):
    code, ok = _run(tmp_path, *TINY)
    lossless = ok["tasks"]["gsm8k_smoke"]["lossless"]
    assert code == 0 and lossless["verdict"] == "PASS" and lossless["identical"] == 4
    code, broken = _run(tmp_path, *TINY, "--inject", "emit_rejected_draft@3")
    task = broken["tasks"]["gsm8k_smoke"]
    assert code == 1 and broken["verdict"] == "FAIL"
    assert task["verdict"] == "REPORT"  # accuracy says nothing is wrong ...
    assert task["lossless"]["verdict"] == "FAIL" and task["lossless"]["divergent"] >= 1  # ... the lossless gate does
    assert task["lossless"]["divergences"][0]["position"] >= 0
    # A planted bug is part of the build: the mutated run pairs with twins of its own (never a clean run's), and
    # their audit is clean (the bug is in verification, which twins never reach): the comparison caught it.
    assert task["lossless"]["baseline_kind"] == "twin" and task["lossless"]["baseline_run"] != lossless["baseline_run"]
    assert broken["baseline"]["audit"]["first_divergence"] is None
    baselines = [r for r in list_runs(tmp_path) if r.manifest()["config"]["engine"]["spec"] is None]
    assert len(baselines) == 2


def test_floor_warning_for_the_embedded_model_and_not_for_llama():
    smol = lookup(
        "gsm8k", "HuggingFaceTB/SmolLM2-135M-Instruct", {"dtype": "auto", "num_fewshot": 5, "max_output_len": 256}
    )
    test = smol.hypothesis_test(1319)
    assert not test.can_fail and "this gate cannot fail" in test.report(smol.accuracy)
    llama = lookup("gsm8k", "meta-llama/Llama-3.1-8B-Instruct", {"dtype": "auto"}).hypothesis_test(1319)
    assert llama.can_fail and "cannot fail" not in llama.report(74.2)


@pytest.mark.slow
def test_embedded_default_gsm8k_subset_is_lossless_and_the_broken_variant_is_caught(tmp_path):
    # the reference's own settings (5 shots, 256 output tokens), so the accuracy gate is looked up for real
    args = [
        "--model",
        "smollm2",
        "--tasks",
        "gsm8k",
        "--limit",
        "2",
        "--data-dir",
        DATA,
        "--spec",
        "eagle3",
        "--max-batch-size",
        "8",
        "--device-memory",
        "1GiB",
    ]
    code, ok = _run(tmp_path, *args)
    task = ok["tasks"]["gsm8k"]
    assert task["lossless"]["verdict"] == "PASS" and task["lossless"]["identical_rate"] == 1.0
    assert task["verdict"] == "NO-GATE" and "cannot fail" in task["report"]  # reference near the floor
    code, broken = _run(tmp_path, *args, "--inject", "emit_rejected_draft@4")
    task = broken["tasks"]["gsm8k"]
    assert task["verdict"] in ("NO-GATE", "PASS")  # the accuracy gate passes the broken engine
    assert task["lossless"]["verdict"] == "FAIL" and code == 1
