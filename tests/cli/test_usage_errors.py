"""Hostile input at the command line: usage errors of click and of Typer's vendored click end in one
line and exit 2; options are validated where they are declared; every input is checked before a run folder
exists; a task whose requests failed prints no score. All in-process on the tiny preset, nothing loads a model."""

from __future__ import annotations

import json

import pytest
from specdec_eval.cli import main as cli_main
from specdec_eval.cli.run_report import print_report

from ..cli_helpers import run_cli

ERROR = "specdec-eval: error: "
FAST = ("--model", "tiny", "--device-memory", "256MiB", "--device", "cpu")
SMOKE = (*FAST, "--tasks", "gsm8k_smoke", "--no-reference", "--limit", "1", "--max-output-len", "4")


def assert_one_error_line(code: int, err: str, message: str) -> None:
    assert code == 2, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(ERROR), err
    assert message in lines[0], err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "--limit", "abc"], "Invalid value for '--limit'"),
        (["run", "--bogus"], "No such option: --bogus"),
        (["run", "--tp", "2", *FAST], "--tp > 1 needs --gpus"),
        (["waive", "a/t.py::t"], "Missing option '--bug'"),
        (["report"], "Missing argument 'runs'"),
        (["frobnicate"], "No such command"),
        (["compare", "only-one"], "Missing argument"),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(capsys, tmp_path, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(capsys, *argv)
    assert_one_error_line(code, err, message)
    if "--tp" not in argv:  # click's errors say where the help is, on the same line
        assert "(see 'specdec-eval " in err
    assert list(tmp_path.iterdir()) == []


def test_no_command_prints_the_help_then_the_error(capsys):
    code, out, err = run_cli(capsys)
    assert code == 2 and "Traceback" not in err
    assert "Commands" in out + err and "selftest" in out + err
    assert err.strip().splitlines() == [f"{ERROR}missing command (the commands are listed above)"]


def test_main_catches_the_exceptions_of_both_clicks():
    """Typer vendors its own click whose exceptions are not click's; main() knows the classes of both."""
    import typer._click.exceptions as vendored

    assert vendored.ClickException in cli_main.CLICK_ERRORS
    try:
        import click
    except ImportError:
        return
    assert click.ClickException in cli_main.CLICK_ERRORS
    assert not issubclass(vendored.ClickException, click.ClickException)  # why both are needed


def test_a_click_package_usage_error_from_a_command_is_exit_2(capsys, monkeypatch):
    click = pytest.importorskip("click")

    def app(**_):
        raise click.BadParameter("must be odd", param_hint="'--n'")

    monkeypatch.setattr(cli_main, "app", app)
    code, _, err = run_cli(capsys, "x")
    assert_one_error_line(code, err, "Invalid value for '--n': must be odd")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--gpus", "0"], "'--gpus': Input should be greater than or equal to 1"),
        (["--gpus", "-2"], "'--gpus'"),
        (["--num-fewshot", "-1"], "'--num-fewshot'"),
        (["--num-fewshot", "1000"], "'--num-fewshot'"),
        (["--limit", "0"], "'--limit'"),
        (["--limit", "-1"], "'--limit'"),
        (["--max-batch-size", "0"], "'--max-batch-size'"),
        (["--spec", "eagle3", "--draft-len", "17"], "'--draft-len' / '-k'"),
        (["--kv-cache", "v3"], "'v3' is not one of 'v1', 'v2'"),
        (["--dtype", "int4"], "'int4' is not one of"),
        (["--device", "tpu"], "'tpu' is not one of"),
        (["--warmup", "sometimes"], "'sometimes' is not one of 'auto', 'on', 'off'"),
        (["--device-memory", "0"], "memory size must be positive"),
        (["--seed", "-1"], "'--seed'"),
        (["--rank-timeout", "0"], "'--rank-timeout'"),
    ],
)
def test_run_options_are_validated_where_declared(capsys, tmp_path, argv, message):
    out = tmp_path / "runs"
    code, _, err = run_cli(capsys, "run", *SMOKE, "--out", str(out), *argv)
    assert_one_error_line(code, err, message)
    assert not out.exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--temperature", "-0.5"], "'--temperature'"),
        (["--top-p", "0"], "'--top-p': must be in (0, 1]"),
        (["--top-p", "1.01"], "'--top-p'"),
        (["--top-k", "-1"], "'--top-k'"),
        (["-n", "0"], "'--max-new-tokens' / '-n'"),
        (["--block-size", "0"], "'--block-size'"),
        (["--max-retries", "-1"], "'--max-retries'"),
        (["--capture-layers", "1,2"], "three layer ids"),
    ],
)
def test_generate_options_are_validated_where_declared(capsys, monkeypatch, argv, message):
    import io
    import sys

    monkeypatch.setattr(sys, "stdin", io.StringIO("hi\n"))
    code, out, err = run_cli(capsys, "generate", "-", *FAST, *argv)
    assert_one_error_line(code, err, message)
    assert out == ""


def test_help_lists_the_registries_choices(capsys, monkeypatch):
    from specdec_eval.evals.tasks.registry import TASKS
    from specdec_eval.workers.config import DTYPES
    from specdec_eval.workers.kv_cache import KV_CACHE_MANAGERS
    from specdec_eval.workers.spec import SPEC_ALGORITHMS

    monkeypatch.setenv("COLUMNS", "300")  # rich wraps the help to the terminal's width
    code, out, _ = run_cli(capsys, "run", "--help")
    assert code == 0
    flat = " ".join(out.split())
    assert f"<{'|'.join(KV_CACHE_MANAGERS)}>" in flat
    assert f"<{'|'.join(('none', *SPEC_ALGORITHMS))}>" in flat
    assert f"<{'|'.join(DTYPES)}>" in flat
    assert all(name in flat for name in TASKS)


# --- inputs checked before the run folder exists ----------------------------------------------------------------


def _write_gsm8k(folder, test_text: str) -> str:
    (folder / "gsm8k").mkdir(parents=True)
    (folder / "gsm8k" / "train.jsonl").write_text(json.dumps({"question": "q", "answer": "#### 1"}) + "\n")
    (folder / "gsm8k" / "test.jsonl").write_text(test_text)
    return str(folder)


@pytest.mark.parametrize(
    ("test_text", "message"),
    [
        ('{"question": "q", "solution": "1"}\n', "test.jsonl:1: missing 'answer'"),
        ('{"question": "q", "answer": "1"}\n{"question": \n', "test.jsonl:2:14: not valid JSON"),
        ("", "test.jsonl: no rows"),
    ],
)
def test_bad_data_leaves_no_run_folder(capsys, tmp_path, test_text, message):
    data = _write_gsm8k(tmp_path / "data", test_text)
    out = tmp_path / "runs"
    argv = ["run", *FAST, "--tasks", "gsm8k", "--limit", "1", "--no-reference", "--data-dir", data, "--out", str(out)]
    code, _, err = run_cli(capsys, *argv)
    assert_one_error_line(code, err, message)
    assert not out.exists()  # validated before the pipeline made a folder with only manifest.json in it


def test_num_fewshot_is_bounded_by_the_tasks_train_split(capsys, tmp_path):
    code, _, err = run_cli(capsys, "run", *SMOKE, "--num-fewshot", "6", "--out", str(tmp_path / "runs"))
    assert_one_error_line(code, err, "--num-fewshot 6: gsm8k_smoke has only 5 examples")


def test_out_and_events_destinations(capsys, tmp_path, monkeypatch):
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    code, _, err = run_cli(capsys, "run", *SMOKE, "--out", str(a_file))
    assert_one_error_line(code, err, "is a file, not a folder")
    code, _, err = run_cli(capsys, "run", *SMOKE, "--out", str(a_file / "runs"))
    assert_one_error_line(code, err, "is a file, so no folder can be made under it")

    import io
    import sys

    for events, message in ((tmp_path, "is a folder"), (tmp_path / "no" / "e.jsonl", "does not exist")):
        monkeypatch.setattr(sys, "stdin", io.StringIO("hi\n"))
        code, _, err = run_cli(capsys, "generate", "-", *FAST, "--events", str(events))
        assert_one_error_line(code, err, message)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file.txt"]


def test_prompts_file_that_is_not_utf8_names_line_and_column(capsys, tmp_path):
    prompts = tmp_path / "p.txt"
    prompts.write_bytes(b"fine\nab\xffc\n")
    code, _, err = run_cli(capsys, "generate", str(prompts), *FAST)
    assert_one_error_line(code, err, f"{prompts}:2:3: not valid UTF-8 (byte 0xff)")


def test_faults_for_an_endpoint_run_are_refused(capsys, tmp_path):
    argv = ["run", *SMOKE, "--endpoint", "http://127.0.0.1:9", "--inject", "target_forward", "--out", str(tmp_path)]
    code, _, err = run_cli(capsys, *argv)
    assert_one_error_line(code, err, "--inject can never fire in an endpoint run")


def test_a_bad_draft_model_is_reported_before_the_baseline_runs(capsys, tmp_path):
    head = tmp_path / "head"
    head.mkdir()
    (head / "config.json").write_text("{}")
    out = tmp_path / "runs"
    code, _, err = run_cli(capsys, "run", *SMOKE, "--spec", "eagle3", "--draft-model", str(head), "--out", str(out))
    assert_one_error_line(code, err, str(head / "config.json"))
    assert not out.exists()  # no baseline run was made first


# --- failed requests are not a score -------------------------------------------------------------------------------


def _summary(num_failed: int) -> dict:
    task = {
        "num_samples": 8,
        "data": "smoke:x",
        "report": "Evaluated accuracy: 0.000",
        "filter_scores": {"strict-match": 0.0, "flexible-extract": 0.0},
        "score": 0.0,
        "reference": None,
        "threshold": None,
        "theta": None,
        "verdict": "FAIL" if num_failed else "REPORT",
        "acceptance": None,
        "num_failed_requests": num_failed,
    }
    return {"tasks": {"gsm8k_smoke": task}, "events": {}, "verdict": "FAIL", "elapsed_s": 1.0, "world_size": 1}


def test_a_task_with_failed_requests_prints_no_score(capsys):
    print_report(_summary(8))
    out = capsys.readouterr().out
    assert "score n/a: 8 of 8 requests FAILED" in out
    assert "0.00" not in out and "Evaluated accuracy" not in out
    row = next(line for line in out.splitlines() if line.startswith("gsm8k_smoke "))
    assert row.split()[1] == "n/a" and "(8 of 8 requests FAILED)" in row


def test_a_task_without_failed_requests_prints_its_score(capsys):
    print_report(_summary(0))
    out = capsys.readouterr().out
    assert "score = their mean = 0.00" in out and "Evaluated accuracy" in out and "n/a" not in out
