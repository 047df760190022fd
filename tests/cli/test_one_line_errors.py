"""Inputs that could end in a traceback or leave a half-made run folder: one line on stderr and exit status 2,
with nothing written: sizes beyond any machine, `ab --alpha 5` (checked before anything runs), a lone surrogate
in a prompt, a prompts path that is a folder or missing, YAML errors, `--sample bogus`, a missing reference."""

from __future__ import annotations

import json

import pytest
from specdec_eval.evals.gates.references import read_yaml
from specdec_eval.results.store import new_run
from specdec_eval.workers.config import parse_bytes

from specdec_eval.errors import UserError

from ..cli_helpers import run_cli

FAST = ["--model", "tiny", "--device", "cpu", "--device-memory", "256MiB"]
SMOKE = [*FAST, "--tasks", "gsm8k_smoke", "--no-reference", "--limit", "1", "--max-output-len", "4"]


def _one_error_line(code: int, err: str) -> str:
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("specdec-eval: error: "), err
    return lines[0]


@pytest.mark.parametrize("size", ["1e400GiB", "1e30GiB", "nan"])
def test_memory_sizes_beyond_any_machine(size, tmp_path, capsys):
    with pytest.raises(UserError):
        parse_bytes(size)
    line = _one_error_line(*run_cli(capsys, "run", *SMOKE, "--device-memory", size, "--out", str(tmp_path))[::2])
    assert "--device-memory" in line
    line = _one_error_line(*run_cli(capsys, "serve", *FAST, "--max-request-bytes", size)[::2])
    assert size in line
    assert parse_bytes("8GiB") == 8 * 2**30


def test_ab_alpha_is_checked_before_anything_runs(tmp_path, capsys):
    """tmp_path is no repository: the alpha error comes first, so nothing was checked out or run."""
    line = _one_error_line(
        *run_cli(
            capsys,
            "ab",
            "HEAD",
            "HEAD",
            "--repo",
            str(tmp_path),
            "--alpha",
            "5",
            "--out",
            str(tmp_path / "runs"),
            "--",
            *SMOKE,
        )[::2]
    )
    assert line == "specdec-eval: error: --alpha must be between 0 and 1 (exclusive), got 5"
    assert list(tmp_path.iterdir()) == []


def test_generate_lone_surrogate_folder_and_missing_file(tmp_path, capsys):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "ok"}\n{"prompt": "half \\ud800 a character"}\n')
    line = _one_error_line(*run_cli(capsys, "generate", str(prompts), *FAST)[::2])
    assert line == (
        f"specdec-eval: error: {prompts}:2: the prompt holds a lone surrogate \\ud800 at character 6, "
        "which is not text (JSON spells a character outside the BMP as a surrogate pair)"
    )
    chat = tmp_path / "c.jsonl"
    chat.write_text(json.dumps({"messages": [{"role": "user", "content": "\udfff"}]}) + "\n")
    assert "a message's content holds a lone surrogate" in _one_error_line(
        *run_cli(capsys, "generate", str(chat), *FAST)[::2]
    )
    folder, missing = tmp_path / "prompts-folder", tmp_path / "nonexistent"
    folder.mkdir()
    line = _one_error_line(*run_cli(capsys, "generate", str(folder), *FAST)[::2])
    assert line == f"specdec-eval: error: prompts file {folder} is a folder; name a file of prompts, or '-' for stdin"
    line = _one_error_line(*run_cli(capsys, "generate", str(missing), *FAST)[::2])
    assert line == f"specdec-eval: error: prompts file not found: {missing}"  # and no "(it is a folder)"


def test_yaml_errors_are_one_line(tmp_path, capsys):
    bad = tmp_path / "refs.yaml"
    bad.write_text("a:\n  b: [1, 2\n  c: 3\n")
    with pytest.raises(UserError) as e:
        read_yaml(bad)
    assert str(e.value) == f"{bad}: not valid YAML (expected ',' or ']', but got ':' at line 3, column 4)"
    line = _one_error_line(
        *run_cli(
            capsys, "run", *SMOKE, "--spec", "eagle3", "--acceptance-refs", str(bad), "--out", str(tmp_path / "runs")
        )[::2]
    )
    assert "not valid YAML" in line and not (tmp_path / "runs").exists()


def test_user_errors_found_late_leave_no_run_folder(tmp_path, capsys):
    runs = tmp_path / "runs"
    line = _one_error_line(*run_cli(capsys, "run", *SMOKE, "--sample", "bogus", "--out", str(runs))[::2])
    assert "--sample" in line and not runs.exists()
    data = tmp_path / "data" / "gsm8k"
    data.mkdir(parents=True)
    row = json.dumps({"question": "1+1?", "answer": "2\n#### 2"}) + "\n"
    (data / "train.jsonl").write_text(row * 3)
    (data / "test.jsonl").write_text(row)
    line = _one_error_line(
        *run_cli(
            capsys,
            "run",
            *FAST,
            "--tasks",
            "gsm8k",
            "--data-dir",
            str(tmp_path / "data"),
            "--limit",
            "1",
            "--out",
            str(runs),
        )[::2]
    )
    assert "no gsm8k reference for model 'tiny'" in line and not runs.exists()


def test_a_late_user_error_removes_the_run_it_made_unless_work_was_done(tmp_path, capsys, monkeypatch):
    """A user error raised once the run folder exists removes it again (the pipeline's safety net), unless it holds
    finished generations (resumable work is kept)."""
    from specdec_eval.evals.pipeline import one_run as pipeline

    def refuse(*args, **kwargs):
        raise UserError("found late")

    monkeypatch.setattr(pipeline, "evaluate", refuse)
    runs = tmp_path / "runs"
    assert _one_error_line(*run_cli(capsys, "run", *SMOKE, "--out", str(runs))[::2]).endswith("found late")
    assert [p.name for p in runs.iterdir()] == [".store.lock"]  # the store stays; no run in it
    run = new_run(tmp_path / "other", "abc123")
    (run.partial_dir / "generations.rank0.jsonl").parent.mkdir()
    (run.partial_dir / "generations.rank0.jsonl").write_text("{}\n")
    assert run.discard_unstarted() is False and run.path.exists()
    (run.partial_dir / "generations.rank0.jsonl").unlink()
    assert run.discard_unstarted() is True and not run.path.exists()
