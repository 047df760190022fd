"""`--baseline RUN`: a lossless verdict rests only on a finished, clean, non-speculative run of
a comparable configuration; anything else is refused with one line saying why."""

from __future__ import annotations

import time

import pytest
from specdec_eval.evals.lossless.baseline import baseline_problem
from specdec_eval.evals.run_identity import run_config
from specdec_eval.evals.run_types import EvalOptions
from specdec_eval.evals.tasks.registry import parse_tasks
from specdec_eval.results import store
from specdec_eval.workers.config import EngineConfig, SpecConfig
from specdec_eval.workers.engine.engine import identity_of

from ...cli_helpers import run_cli

OPTIONS = EvalOptions(tasks=parse_tasks("gsm8k_smoke"), limit=4, max_output_len=24, no_reference=True)
SPEC = identity_of(EngineConfig(model="tiny", spec=SpecConfig()), "float32")
PLAIN = identity_of(EngineConfig(model="tiny"), "float32")


def _recorded(root, engine=None, options=OPTIONS, finished=True, **summary) -> store.Run:
    """A run folder as the pipeline writes one: a plain tiny run of OPTIONS unless told otherwise."""
    identity = identity_of(engine or EngineConfig(model="tiny"), "float32")
    run = store.new_run(root, "abc123")
    with run:
        run.write_manifest(
            {
                "run_id": run.run_id,
                "config": run_config(identity, options),
                "finished": time.time(),
                "engine": {"kind": "local", "model": "tiny", "resolved_dtype": "float32"},
            }
        )
        if finished:
            task = {"num_samples": 4, "verdict": "REPORT", "num_failed_requests": 0}
            run.write_summary(
                {
                    "verdict": "PASS",
                    "tasks": {"gsm8k_smoke": task},
                    "events": {},
                    "spec": None,
                    "failing_events": 0,
                    **summary,
                }
            )
    return run


@pytest.mark.parametrize(
    "make, why",
    [
        (lambda root: _recorded(root, EngineConfig(model="tiny", spec=SpecConfig()), spec="eagle3"), "speculative"),
        (lambda root: _recorded(root, EngineConfig(model="tiny", inject=("emit_rejected_draft",))), "injected faults"),
        (lambda root: _recorded(root, failing_events=2, verdict="FAIL"), "failing event"),
        (lambda root: _recorded(root, finished=False), "not finished"),
        (lambda root: _recorded(root, early_stopped=True), "stopped early"),
        (
            lambda root: _recorded(root, options=EvalOptions(tasks=parse_tasks("gsm8k_smoke"), max_output_len=99)),
            "max_output_len",
        ),
        (lambda root: _recorded(root), "model"),
    ],
    ids=["speculative", "faulted", "failed", "unfinished", "early-stopped", "other-limit", "other-engine"],
)
def test_runs_no_lossless_verdict_may_rest_on_are_refused(tmp_path, make, why):
    run = make(tmp_path)
    if why == "model":  # a local run of another model
        manifest = run.manifest()
        run.write_manifest({**manifest, "engine": {**manifest["engine"], "model": "smollm2"}})
    problem = baseline_problem(run, SPEC, OPTIONS)
    assert problem is not None and why in problem and run.run_id in problem


def test_a_clean_plain_run_of_the_same_evaluation_is_accepted(tmp_path):
    assert baseline_problem(_recorded(tmp_path), SPEC, OPTIONS) is None


def test_run_refuses_a_speculative_faulted_failed_baseline_in_one_line_before_running(capsys, tmp_path):
    """The issue's case: a speculative, fault-injected, FAILed run was accepted ("lossless PASS 3/3")."""
    bad = _recorded(
        tmp_path,
        EngineConfig(model="tiny", spec=SpecConfig(), inject=("emit_rejected_draft",)),
        spec="eagle3",
        verdict="FAIL",
    )
    code, out, err = run_cli(
        capsys,
        "run",
        "--model",
        "tiny",
        "--tasks",
        "gsm8k_smoke",
        "--limit",
        "4",
        "--max-output-len",
        "24",
        "--no-reference",
        "--spec",
        "eagle3",
        "--out",
        str(tmp_path),
        "--baseline",
        bad.run_id,
    )
    assert code == 2 and out == "" and "is speculative" in err and len(err.strip().splitlines()) == 1
    assert len(store.list_runs(tmp_path)) == 1  # nothing ran
