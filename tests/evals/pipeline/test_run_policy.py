"""The run pipeline's one baseline and control policy (evals/pipeline/run.py): what it decodes for a backend that can
do this or that (a fake backend records the sides it is asked to evaluate). Where the three copies it replaced had
drifted apart: tests/evals/pipeline/test_run_on_every_backend.py."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
from specdec_eval.evals.lossless.baseline import BaselineKind, BaselineRef
from specdec_eval.evals.pipeline import run as pipeline
from specdec_eval.evals.pipeline.backends import Abilities, RunTarget
from specdec_eval.evals.pipeline.run_sides import Side
from specdec_eval.evals.run_types import EvalOptions, RunPlan
from specdec_eval.evals.tasks.registry import parse_tasks
from specdec_eval.results import store
from specdec_eval.results.run_summary import RunSummary
from specdec_eval.workers.config import EngineConfig, SpecConfig
from specdec_eval.workers.engine.engine import identity_of

from ...cli.test_run_cli import SHARED_DATA, needs_shared_data

OPTIONS = EvalOptions(tasks=parse_tasks("gsm8k_smoke"), no_reference=True)
SPEC = EngineConfig(model="tiny", spec=SpecConfig(), dtype="bfloat16")


@dataclass
class FakeBackend:
    """A backend that records which sides the policy asks it to evaluate, and finds what `recorded` holds."""

    abilities: Abilities
    recorded: set[str] = field(default_factory=set)  # roles with a finished run already in the store
    target: RunTarget = field(default_factory=lambda: RunTarget(SPEC))
    knows_identity: bool = True  # False: a server, known only once started
    dry_run: bool = False
    calls: list[tuple[str, BaselineRef | None]] = field(default_factory=list)

    def check_target(self) -> None:
        pass

    def preflight(self, plan) -> None:
        pass

    def identity(self, side: Side):
        return ("known", side.role) if self.knows_identity else None

    def declared_identity(self):
        return identity_of(self.target.engine)

    def scorer(self):
        return "the plain engine's scorer"

    def evaluate(self, side, plan, baseline, progress_for):
        self.calls.append((side.role, baseline))
        return RunSummary(run_dir=f"/runs/{side.role}")

    def evaluate_paired(self, plan, control, progress_for, score_sampled=False):
        self.calls.append(("paired", BaselineRef(None, BaselineKind.TWIN, control=control)))
        return RunSummary(run_dir="/runs/paired")


@pytest.fixture
def lookups(monkeypatch):
    """find_baseline answers from the fake backend's `recorded` roles."""
    state = {}

    def find(out, identity, options):
        role = identity[1] if isinstance(identity, tuple) else None
        return store.Run(Path(f"/runs/recorded-{role}")) if role in state["backend"].recorded else None

    monkeypatch.setattr(pipeline, "find_baseline", find)
    return state


def _abilities(**changes) -> Abilities:
    base = dict(
        speculative=True,
        dtype="bfloat16",
        plain_side=True,
        pairs=True,
        control_shape={"max_batch_size": 1},
        reuses_baseline=True,
        scores=True,
    )
    return Abilities(**{**base, **changes})


@pytest.fixture
def run_on(lookups, tmp_path):
    """run(backend, baseline=..., control=...): the policy's calls on a fake backend."""

    def go(backend, baseline="paired", control=None, options=OPTIONS):
        lookups["backend"] = backend
        pipeline.run(RunPlan(options, out=str(tmp_path), baseline=baseline, control=control), backend)
        return backend.calls

    return go


def test_a_local_spec_run_in_bf16_decodes_its_control_then_pairs(run_on):
    calls = run_on(FakeBackend(_abilities()))
    assert [role for role, _ in calls] == ["control", "paired"]
    assert calls[1][1].control == "/runs/control"


def test_a_recorded_control_and_baseline_are_reused(run_on):
    calls = run_on(FakeBackend(_abilities(), recorded={"control", "baseline"}))
    ((role, baseline),) = calls
    assert role == "run" and (baseline.kind, baseline.run, baseline.control) == (
        "recorded",
        None,
        "/runs/recorded-control",
    )


def test_a_backend_that_cannot_pair_decodes_a_separate_baseline_and_says_why(run_on, capsys):
    backend = FakeBackend(_abilities(pairs=False, why_not_paired="it cannot audit paired twins"))
    calls = run_on(backend)
    assert [role for role, _ in calls] == ["control", "baseline", "run"]
    assert (calls[2][1].kind, calls[2][1].run, calls[2][1].control) == ("separate", "/runs/baseline", "/runs/control")
    assert "it cannot audit paired twins" in capsys.readouterr().err


def test_a_named_baseline_is_used_as_it_is_and_nothing_else_is_decoded_for_it(run_on, monkeypatch):
    monkeypatch.setattr("specdec_eval.evals.pipeline.preflight.check_named_baseline", lambda *a: None)
    calls = run_on(FakeBackend(_abilities()), baseline="20260101-000000-abc", control=False)
    ((role, baseline),) = calls
    assert role == "run" and (baseline.run, baseline.kind, baseline.checked) == (
        "20260101-000000-abc",
        "recorded",
        True,
    )


def test_without_a_plain_side_the_gate_looks_one_up_and_no_control_is_made(run_on):
    calls = run_on(FakeBackend(_abilities(plain_side=False, pairs=False, control_shape=None, reuses_baseline=False)))
    ((role, baseline),) = calls
    assert role == "run" and (baseline.kind, baseline.run, baseline.control) == ("recorded", None, None)


def test_a_server_baseline_is_decoded_each_time_and_its_control_found_by_the_started_engine(run_on):
    backend = FakeBackend(
        _abilities(pairs=False, reuses_baseline=False, control_shape={"concurrency": 1}),
        recorded={"control", "baseline"},
        knows_identity=False,
    )
    calls = run_on(backend)
    # nothing is looked up before a server starts: the control side is asked for (evaluate_side finds a recorded
    # one on the started engine), and a server's baseline is evaluated again
    assert [role for role, _ in calls] == ["control", "baseline", "run"]


def test_float32_makes_no_control_unless_asked_and_a_plain_run_has_no_baseline(run_on):
    assert [r for r, _ in run_on(FakeBackend(_abilities(dtype="float32")))] == ["paired"]
    assert [r for r, _ in run_on(FakeBackend(_abilities(speculative=False)))] == ["run"]
    forced = run_on(FakeBackend(_abilities(dtype="float32")), control=True)
    assert [r for r, _ in forced] == ["control", "paired"]


SAMPLED = EvalOptions(tasks=parse_tasks("gsm8k_sampled"), data_dir=str(SHARED_DATA), no_reference=True)
REJECTION = RunTarget(EngineConfig(model="tiny", spec=SpecConfig(sampling="rejection"), dtype="bfloat16"))


@needs_shared_data
def test_a_rejection_sampled_run_of_sampled_tasks_decodes_nothing_but_itself_and_is_scored(run_on, capsys):
    """Judged in distribution (evals/lossless/scoring.py): no control, no decoded baseline; the plain engine's scorer
    goes to the gate."""
    calls = run_on(FakeBackend(_abilities(), target=REJECTION), options=SAMPLED)
    ((role, baseline),) = calls
    assert role == "run" and (baseline.kind, baseline.run, baseline.scorer) == (
        "scored",
        None,
        "the plain engine's scorer",
    )
    assert "judged in distribution" in capsys.readouterr().err


@needs_shared_data
def test_a_greedy_task_beside_a_scored_one_gets_a_separate_baseline_and_the_scorer_too(run_on):
    options = replace(SAMPLED, tasks=parse_tasks("gsm8k_smoke,gsm8k_sampled"))
    calls = run_on(FakeBackend(_abilities(), target=REJECTION), options=options)
    assert [role for role, _ in calls] == ["control", "baseline", "run"]  # paired twins would have no scorer
    assert (calls[2][1].kind, calls[2][1].scorer) == ("separate", "the plain engine's scorer")


@needs_shared_data
def test_the_coupled_sampler_keeps_token_identity_for_sampled_tasks(run_on):
    calls = run_on(FakeBackend(_abilities()), options=SAMPLED)
    assert [role for role, _ in calls] == ["control", "paired"]
