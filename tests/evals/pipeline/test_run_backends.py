"""One run path: `pipeline.run.run(plan, backend)` over a registry of backends (evals/pipeline/backends.py), each built
from a RunTarget; `run` picks one from its flags, launch/ calls back into no command, and cli/ holds no job driver or
A/B controller."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from specdec_eval.evals.pipeline import run as pipeline_run
from specdec_eval.evals.pipeline.backends import BACKENDS, RunTarget, make_backend
from specdec_eval.evals.pipeline.backends.endpoint import EndpointBackend
from specdec_eval.evals.pipeline.backends.local import LocalBackend
from specdec_eval.evals.pipeline.backends.torchrun import JOB_DRIVER, TorchrunBackend
from specdec_eval.launch.rank_main import load_driver
from specdec_eval.serve.job_driver import JOB_DRIVER as SERVE_DRIVER
from specdec_eval.workers.config import EngineConfig

from specdec_eval.errors import UserError

from ...cli_helpers import run_cli

ROOT = Path(__file__).resolve().parents[3]


def test_the_registry_names_every_backend_and_refuses_others():
    assert BACKENDS == ("local", "torchrun", "endpoint")
    with pytest.raises(UserError, match="unknown run backend 'slurm' \\(known: local, torchrun, endpoint\\)"):
        make_backend("slurm", RunTarget(EngineConfig()))


@pytest.fixture
def picked(monkeypatch):
    """The backend `run` hands to pipeline.run, without running it."""
    seen = []

    def fake_run(plan, backend, progress_for=None):
        seen.append((plan, backend))
        from specdec_eval.results.run_summary import RunSummary

        return RunSummary.from_json(
            {
                "verdict": "PASS",
                "tasks": {},
                "events": {},
                "failing_events": 0,
                "elapsed_s": 0.0,
                "model": "tiny",
                "kv_cache": "v1",
                "spec": None,
                "world_size": 1,
            }
        )

    monkeypatch.setattr(pipeline_run, "run", fake_run)
    return seen


ARGS = ("run", "--model", "tiny", "--tasks", "gsm8k_smoke", "--no-reference", "--json", "--device", "cpu")


def test_run_picks_the_local_backend(capsys, picked, tmp_path):
    code, out, err = run_cli(capsys, *ARGS, "--out", str(tmp_path), "--spec", "eagle3", "--baseline", "separate")
    assert code == 0, err
    plan, backend = picked[0]
    assert isinstance(backend, LocalBackend) and plan.baseline == "separate"
    assert backend.config.spec.algorithm == "eagle3" and plan.out == str(tmp_path)


def test_run_picks_the_torchrun_backend(capsys, picked, tmp_path):
    code, out, err = run_cli(capsys, *ARGS, "--out", str(tmp_path), "--gpus", "2", "--rank-timeout", "30")
    assert code == 0, err
    backend = picked[0][1]
    assert isinstance(backend, TorchrunBackend)
    assert (backend.job.gpus, backend.job.rank_timeout_s, backend.dry_run) == (2, 30.0, False)


def test_run_picks_the_endpoint_backend(capsys, picked, tmp_path):
    urls = ("--endpoint", "http://127.0.0.1:9", "--baseline-endpoint", "http://127.0.0.1:8")
    code, out, err = run_cli(capsys, *ARGS, "--out", str(tmp_path), *urls, "--spec", "eagle3", "--draft-len", "2")
    assert code == 0, err
    backend = picked[0][1]
    assert isinstance(backend, EndpointBackend)
    assert (backend.server.url, backend.server.spec, backend.server.max_draft_len) == (
        "http://127.0.0.1:9",
        "eagle3",
        2,
    )
    assert backend.baseline_server.url == "http://127.0.0.1:8" and backend.baseline_server.spec is None


def test_job_drivers_are_library_functions_and_launch_refuses_a_command_module():
    for driver in (JOB_DRIVER, SERVE_DRIVER):
        assert not driver.startswith("specdec_eval.cli"), driver
        assert callable(load_driver(driver))
    with pytest.raises(UserError, match="drivers are library functions"):
        load_driver("specdec_eval.cli.run:job_driver")


def _imports(path: Path) -> set[str]:
    """The top-level folders (cli, evals, ...) a module imports, relative or through specdec_eval."""
    depth = len(path.relative_to(ROOT).parts) - 1
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level > depth and node.module:
            found.add(node.module.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("specdec_eval."):
            found.add(node.module.split(".")[1])
    return found


def test_launch_imports_no_command_and_cli_starts_no_thread_or_process():
    for path in (ROOT / "launch").glob("*.py"):
        assert "cli" not in _imports(path), path.name
        assert not re.search(r"specdec_eval\.cli\.\w+:\w+", path.read_text(encoding="utf-8")), path.name  # a callback
    for path in (ROOT / "cli").glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        modules = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        modules |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level == 0}
        assert not modules & {"threading", "subprocess"}, path.name
