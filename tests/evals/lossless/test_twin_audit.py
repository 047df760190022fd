"""The audited paired baseline: a paired run's twins share the spec-dec engine's prefill and target
forward, so a seeded share of them is checked on an engine with no spec worker; a bug that reaches the twins FAILs
the lossless gate in the default run, and no twin is ever a later run's plain baseline."""

from __future__ import annotations

import json

import pytest
import torch
from specdec_eval.evals.lossless.identity_judge import CHANGES_TARGET
from specdec_eval.evals.lossless.twin_audit import WeightSeal, audit_order, audit_size
from specdec_eval.results.store import list_runs, open_run

from ...cli_helpers import run_cli

# Settings where both planted bugs below change the twins of the documents the seeded audit takes first.
ARGS = (
    "run",
    "--model",
    "tiny",
    "--tasks",
    "gsm8k_smoke",
    "--no-reference",
    "--device-memory",
    "256MiB",
    "--spec",
    "eagle3",
    "--json",
)
SMALL = ("--limit", "4", "--max-output-len", "24")
CAUGHT = ("--limit", "8", "--max-output-len", "32")


def _run(capsys, out, *extra: str) -> tuple[int, dict]:
    code, stdout, err = run_cli(capsys, *ARGS, "--out", str(out), *extra)
    assert code in (0, 1), err[-2000:]
    return code, json.loads(stdout)


def test_audit_size_is_a_quarter_and_at_least_two_and_the_order_is_seeded():
    assert [audit_size(n) for n in (1, 2, 3, 8, 10, 100)] == [1, 2, 2, 2, 3, 25]
    hashes = [f"h{i}" for i in range(20)]
    assert audit_order(hashes, 0) == audit_order(list(hashes), 0)  # a resumed run audits the same documents
    assert audit_order(hashes, 0) != audit_order(hashes, 1)
    assert sorted(audit_order(hashes, 0)) == list(range(20)) and audit_order(hashes, 0) != list(range(20))


@pytest.mark.parametrize("bug", ["draft_kv_into_target", "spec_alters_target"])
def test_a_bug_that_reaches_the_twins_fails_the_default_run_and_a_later_separate_run(capsys, tmp_path, bug):
    code, paired = _run(capsys, tmp_path, *CAUGHT, "--inject", bug)
    lossless = paired["tasks"]["gsm8k_smoke"]["lossless"]
    assert lossless["identical"] == lossless["num_pairs"]  # spec-dec output and twin agree: both carry the bug ...
    assert code == 1 and lossless["verdict"] == "FAIL" and CHANGES_TARGET in lossless["reason"]  # ... the audit sees it
    audit = paired["baseline"]["audit"]
    first = audit["first_divergence"]
    assert paired["baseline"]["kind"] == "twin" and first is not None
    assert audit["audited"][-1] == {"task": first["task"], "doc_id": first["doc_id"]}  # it stopped there
    manifest = open_run(paired["run_dir"]).manifest()
    assert manifest["baseline_audit"]["first_divergence"] == first
    # The same folder, --baseline separate: the mutated twin is not taken for a plain run; a plain one is made.
    code, separate = _run(capsys, tmp_path, *CAUGHT, "--inject", bug, "--baseline", "separate")
    lossless = separate["tasks"]["gsm8k_smoke"]["lossless"]
    assert code == 1 and lossless["verdict"] == "FAIL" and lossless["divergent"] >= 1
    assert lossless["baseline_kind"] == "separate" and lossless["baseline_run"] != paired["baseline"]["run"]
    plain = open_run(lossless["baseline_run"], tmp_path).manifest()["config"]["engine"]
    assert plain["spec"] is None and plain["inject"] == [bug]  # the planted bug is in the baseline's build and key


def test_a_clean_paired_run_passes_with_its_audit_and_its_twin_is_never_a_baseline(capsys, tmp_path):
    code, paired = _run(capsys, tmp_path, *SMALL)
    lossless = paired["tasks"]["gsm8k_smoke"]["lossless"]
    assert code == 0 and lossless["verdict"] == "PASS" and lossless["baseline_kind"] == "twin"
    audit = paired["baseline"]["audit"]
    assert audit["num_audited"] == audit["planned"] == 2 and audit["first_divergence"] is None
    assert lossless["baseline_label"] == "paired twin, audited on 2 of 2 planned documents"
    twin = open_run(paired["baseline"]["run"], tmp_path)
    assert twin.summary()["paired_twin"] == {"of": paired["run_id"], "audit": audit}
    # Named as a baseline, the twin and the spec-dec run are refused before anything runs.
    for run, why in ((twin.run_id, "is a paired twin"), (paired["run_id"], "is speculative")):
        code, _, err = run_cli(capsys, *ARGS, *SMALL, "--out", str(tmp_path), "--baseline", run)
        assert code == 2 and why in err and len(err.strip().splitlines()) == 1
    # --baseline separate makes a plain run of its own rather than reuse the twin.
    code, separate = _run(capsys, tmp_path, *SMALL, "--baseline", "separate")
    lossless = separate["tasks"]["gsm8k_smoke"]["lossless"]
    assert code == 0 and lossless["verdict"] == "PASS" and lossless["baseline_kind"] == "separate"
    assert lossless["baseline_run"] != twin.run_id and open_run(lossless["baseline_run"], tmp_path).key != twin.key
    assert len([r for r in list_runs(tmp_path) if r.manifest()["config"]["engine"]["spec"] is None]) == 2


def test_the_weight_seal_sees_any_changed_element():
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.LayerNorm(8)).to(torch.bfloat16)
    seal = WeightSeal(model)
    assert seal.intact()
    with torch.no_grad():
        model[0].weight.view(torch.int16)[3, 5] += 1  # the smallest change there is: one unit in the last place
    assert not seal.intact()


def test_a_spec_worker_that_writes_into_the_shared_weights_is_caught(capsys, tmp_path, monkeypatch):
    """The audit's engine shares the spec engine's loaded weights only while their seal, taken before the spec worker
    was attached, holds: a spec worker that writes into the target's weights as it attaches corrupts spec-dec outputs
    and twins alike, and the audit, on weights of its own from the checkpoint, FAILs the run. (With the seal made
    blind, `WeightSeal.intact` always True, the same run PASSes: the shared weights carry the bug to the audit.)"""
    from specdec_eval.workers.spec.eagle3 import Eagle3OneModelWorker

    attach = Eagle3OneModelWorker.__init__

    def writes_into_the_target(self, *args, **kwargs) -> None:
        attach(self, *args, **kwargs)
        with torch.no_grad():
            w = self.embed.weight  # the one target weight the worker holds: the token embedding its head reads
            w.add_(torch.randn(w.shape, generator=torch.Generator().manual_seed(0)).to(w) * w.std() * 4)

    monkeypatch.setattr(Eagle3OneModelWorker, "__init__", writes_into_the_target)
    code, paired = _run(capsys, tmp_path, *SMALL)
    lossless = paired["tasks"]["gsm8k_smoke"]["lossless"]
    assert lossless["identical"] == lossless["num_pairs"]  # spec-dec outputs and twins agree: both carry the bug
    assert code == 1 and lossless["verdict"] == "FAIL" and CHANGES_TARGET in lossless["reason"]
    assert paired["baseline"]["audit"]["first_divergence"] is not None
