"""Run keys see uncommitted changes: a modified tree never resumes or pairs with a clean run of
the same commit."""

from __future__ import annotations

import subprocess

from specdec_eval.evals import run_identity
from specdec_eval.evals.run_types import EvalOptions
from specdec_eval.evals.tasks.registry import parse_tasks
from specdec_eval.results.manifest import git_state
from specdec_eval.workers.config import EngineConfig
from specdec_eval.workers.engine.engine import identity_of


def _repo(tmp_path):
    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    git("init", "-q")
    git("config", "user.email", "t@example.com")
    git("config", "user.name", "t")
    (tmp_path / "code.py").write_text("x = 1\n")
    git("add", "code.py")
    git("commit", "-qm", "one")
    return tmp_path


def test_git_state_hashes_what_is_uncommitted(tmp_path):
    repo = _repo(tmp_path)
    clean = git_state(repo)
    assert clean["dirty"] is False and clean["diff_sha256"] is None and len(clean["commit"]) == 40
    (repo / "code.py").write_text("x = 2\n")
    edited = git_state(repo)
    assert edited["dirty"] and edited["diff_sha256"] and edited["commit"] == clean["commit"]
    (repo / "new.py").write_text("y = 1\n")  # an untracked file that git does not ignore changes the code too
    added = git_state(repo)
    assert added["diff_sha256"] not in (None, edited["diff_sha256"])
    (repo / "code.py").write_text("x = 3\n")
    assert git_state(repo)["diff_sha256"] != added["diff_sha256"]


def test_a_dirty_tree_gets_another_run_key(monkeypatch):
    identity, options = identity_of(EngineConfig(model="tiny")), EvalOptions(parse_tasks("gsm8k_smoke"))
    states = {
        "clean": {"commit": "c" * 40, "dirty": False, "diff_sha256": None},
        "dirty": {"commit": "c" * 40, "dirty": True, "diff_sha256": "abc"},
    }
    keys = {}
    for name, state in states.items():
        monkeypatch.setattr(run_identity, "git_state", lambda state=state: state)
        keys[name] = run_identity.run_key(identity, options)
    assert keys["clean"] != keys["dirty"]


def test_planted_bugs_stay_in_the_baseline_key_and_environmental_faults_do_not(tmp_path):
    """A behaviour fault is a code patch: the baseline's build carries it, so a mutated baseline's key never equals a
    clean run's, and such a run may pair; an environmental fault acts on one engine: a separate clean
    baseline."""
    from specdec_eval.evals.pipeline.backends import RunTarget
    from specdec_eval.evals.pipeline.backends.local import LocalBackend
    from specdec_eval.workers.config import SpecConfig

    options = EvalOptions(parse_tasks("gsm8k_smoke"))
    clean = EngineConfig(model="tiny", spec=SpecConfig())
    mutated = EngineConfig(model="tiny", spec=SpecConfig(), inject=("spec_alters_target", "draft_step:1@2"))
    assert run_identity.baseline_config(mutated).inject == ("spec_alters_target",)
    keys = {
        name: run_identity.run_key(identity_of(run_identity.baseline_config(c)), options)
        for name, c in (("clean", clean), ("mutated", mutated))
    }
    assert keys["clean"] != keys["mutated"]
    assert keys["mutated"] == run_identity.run_key(run_identity.baseline_identity(identity_of(mutated)), options)
    planted = EngineConfig(model="tiny", spec=SpecConfig(), inject=("draft_kv_into_target",))
    assert LocalBackend(RunTarget(planted)).abilities.pairs
    assert not LocalBackend(RunTarget(mutated)).abilities.pairs  # draft_step:1@2 is environmental


def test_a_paired_twin_never_has_a_plain_runs_key():
    from specdec_eval.workers.config import SpecConfig

    options = EvalOptions(parse_tasks("gsm8k_smoke"))
    spec = identity_of(EngineConfig(model="tiny", spec=SpecConfig()))
    plain = run_identity.baseline_identity(spec)
    twin = run_identity.twin_identity(spec)
    assert run_identity.run_key(twin, options) != run_identity.run_key(plain, options)
    plain_run = identity_of(EngineConfig(model="tiny"))
    assert run_identity.run_key(plain, options) == run_identity.run_key(plain_run, options)
