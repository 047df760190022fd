"""A task module (SPECDEC_EVAL_TASK_MODULES) that fails: at import, by its shape, or in any method a run calls
(evals/tasks/checked_family.py). Each ends the command in one line and exit status 2, naming the module and the
method, never a traceback; failures before the evaluation leave no run folder."""

from __future__ import annotations

import json

import pytest
from specdec_eval.evals.tasks import registry

from ...cli_helpers import run_cli
from .test_task_modules import ARITH_MODULE, FAST, PROBLEMS, clean_registry  # noqa: F401  (a fixture)

ENV = registry.TASK_MODULES_ENV
pytestmark = pytest.mark.usefixtures("clean_registry")  # every module registered here is gone afterwards


def _module(tmp_path, text: str, name: str = "arith.py"):
    folder = tmp_path / "task"
    folder.mkdir(exist_ok=True)
    (folder / name).write_text(text)
    (folder / "arith.jsonl").write_text("".join(json.dumps({"question": q, "answer": a}) + "\n" for q, a in PROBLEMS))
    return folder / name


def _one_line(code: int, err: str) -> str:
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("specdec-eval: error: "), err
    assert "Traceback" not in err
    return lines[0]


def _run(capsys, tmp_path, *extra: str) -> tuple[int, str, str]:
    return run_cli(capsys, "run", "--tasks", "arith", "--no-reference", *FAST, *extra, "--out", str(tmp_path / "runs"))


@pytest.mark.parametrize(
    "text, words",
    [
        ("raise RuntimeError('no data here')\n", "raised RuntimeError on import: no data here"),
        ("def broken(:\n", "has a syntax error at arith.py:1 (invalid syntax)"),
        (
            ARITH_MODULE.replace('TASKS = (TaskSpec("arith", FAMILY),)', "TASKS = 5"),
            "TASKS must be a list or tuple of TaskSpecs, got a int",
        ),
        (
            ARITH_MODULE.replace('TASKS = (TaskSpec("arith", FAMILY),)', "TASKS = ['arith']"),
            "TASKS must be a list or tuple of TaskSpecs, got a list holding a str",
        ),
        (
            ARITH_MODULE.replace("    max_output_len = 6\n", "    max_output_len = 'six'\n"),
            "FAMILY.max_output_len must be a positive integer",
        ),
    ],
    ids=["raises-at-import", "syntax-error", "tasks-an-int", "tasks-of-strings", "bad-setting"],
)
def test_a_module_that_cannot_be_registered_is_one_line_for_every_command(capsys, tmp_path, monkeypatch, text, words):
    monkeypatch.setenv(ENV, str(_module(tmp_path, text)))
    line = _one_line(*_run(capsys, tmp_path)[::2])
    assert words in line and "task module" in line
    assert not (tmp_path / "runs").exists()
    registry._LOADED.clear()
    code, _, err = run_cli(
        capsys, "run", "--tasks", "gsm8k_smoke", "--no-reference", *FAST, "--out", str(tmp_path / "runs")
    )
    assert words in _one_line(code, err)  # any run: the registry loads every named module


def _failing(method: str, statement: str) -> str:
    """ARITH_MODULE whose `method` runs `statement` first."""
    signature = {
        "source": "def source(self, spec, data_dir):\n",
        "task_yaml": "def task_yaml(self, spec, source, stock, seed):\n",
        "live_correct": "def live_correct(self, output, doc):\n",
    }[method]
    assert signature in ARITH_MODULE
    return ARITH_MODULE.replace(signature, f"{signature}        {statement}\n")


@pytest.mark.parametrize(
    "method, statement, words",
    [
        ("source", "raise KeyError('rows')", "FAMILY.source() raised KeyError: 'rows'"),
        ("source", "return 5", "FAMILY.source() returned a int, not DataSource"),
        ("task_yaml", "raise ValueError('no yaml')", "FAMILY.task_yaml() raised ValueError: no yaml"),
        ("task_yaml", "return None", "FAMILY.task_yaml() returned a NoneType, not str"),
        ("task_yaml", "return 'task: [arith'", "FAMILY.task_yaml() returned YAML that does not parse (line 1: "),
        ("task_yaml", "return 'just words'", "FAMILY.task_yaml() returned YAML without a task name"),
        ("live_correct", "raise ZeroDivisionError", "FAMILY.live_correct() raised ZeroDivisionError"),
    ],
    ids=[
        "source-raises",
        "source-wrong-type",
        "task-yaml-raises",
        "task-yaml-wrong-type",
        "task-yaml-invalid",
        "task-yaml-no-task",
        "live-correct-raises",
    ],
)
def test_a_method_that_fails_at_run_time_is_one_line_and_leaves_no_run_folder(
    capsys, tmp_path, monkeypatch, method, statement, words
):
    monkeypatch.setenv(ENV, str(_module(tmp_path, _failing(method, statement))))
    line = _one_line(*_run(capsys, tmp_path)[::2])
    assert line.startswith(f"specdec-eval: error: task module specdec_eval_task_arith: {words}")
    runs = tmp_path / "runs"
    assert not runs.exists() or not [p for p in runs.iterdir() if p.name[:1].isdigit()], list(runs.iterdir())
