"""`specdec-eval ab`: each side runs its own commit from a worktree; identical code -> no change, changed engine
output -> a difference. Uses a throwaway clone, so the repository under test is never touched."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RUN_ARGS = [
    "--model",
    "tiny",
    "--tasks",
    "gsm8k_smoke",
    "--limit",
    "4",
    "--max-output-len",
    "12",
    "--no-reference",
    "--device-memory",
    "256MiB",
]


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    """A clone of HEAD plus one commit that changes what the tiny model generates (other random weights)."""
    path = tmp_path_factory.mktemp("ab") / "repo"
    subprocess.run(["git", "clone", "-q", str(REPO), str(path)], check=True)
    presets = path / "workers" / "loading" / "presets.py"
    text = presets.read_text()
    assert "TINY_SEED = " in text
    presets.write_text(text.replace("TINY_SEED = ", "TINY_SEED = 1 + ", 1))
    git = ["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "commit", "-qam", "test: other tiny weights"], check=True)
    return path


def _ab(clone: Path, out: Path, a: str, b: str) -> tuple[int, dict]:
    cmd = [
        sys.executable,
        "-m",
        "specdec_eval.cli.main",
        "ab",
        a,
        b,
        "--repo",
        str(clone),
        "--out",
        str(out),
        "--json",
        "--",
        *RUN_ARGS,
    ]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert p.returncode in (0, 1), p.stderr[-2000:]
    return p.returncode, json.loads(p.stdout)


@pytest.mark.slow
def test_ab_identical_commits_no_change_and_changed_output_differs(clone, tmp_path):
    code, same = _ab(clone, tmp_path / "same", "HEAD~1", "HEAD~1")
    assert code == 0 and same["verdict"] == "no significant change"
    (task,) = same["tasks"].values()
    assert task["n"] == 4 and task["outputs"]["identical"] == 4
    code, diff = _ab(clone, tmp_path / "diff", "HEAD~1", "HEAD")
    (task,) = diff["tasks"].values()
    assert task["outputs"]["divergent"] > 0  # the changed engine output shows, whatever the accuracy says
    commits = [diff["run_a"]["commit"], diff["run_b"]["commit"]]
    heads = [
        subprocess.run(["git", "-C", str(clone), "rev-parse", r], capture_output=True, text=True).stdout.strip()
        for r in ("HEAD~1", "HEAD")
    ]
    assert commits == heads  # each side's manifest records its own commit
    worktrees = subprocess.run(["git", "-C", str(clone), "worktree", "list"], capture_output=True, text=True).stdout
    assert len(worktrees.strip().splitlines()) == 1  # worktrees removed afterwards


def test_ab_unknown_ref_is_one_clear_error(tmp_path):
    cmd = [
        sys.executable,
        "-m",
        "specdec_eval.cli.main",
        "ab",
        "no-such-ref",
        "HEAD",
        "--repo",
        str(REPO),
        "--out",
        str(tmp_path),
        "--",
        *RUN_ARGS,
    ]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("specdec-eval: error: git rev-parse"), p.stderr
