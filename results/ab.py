"""A/B of two commits: each side runs its own commit's code, from its own git worktree, with the same
configuration and samples; then the two runs are compared.

The code of a side is installed with `pip install --target` from its worktree into a private folder and put
first on PYTHONPATH, so `python -m specdec_eval.cli.main run ...` really runs that commit (the manifest records
it through SPECDEC_EVAL_SOURCE_DIR). Worktrees and installs are removed afterwards, whatever happens."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

SOURCE_DIR_ENV = "SPECDEC_EVAL_SOURCE_DIR"


class ABError(Exception):
    """Something the user can fix (unknown ref, not a repository, a side's run failed): one line."""


@dataclass
class Side:
    name: str  # "A" or "B"
    ref: str
    commit: str
    worktree: Path
    site: Path


def _git(repo: Path, *args: str) -> str:
    p = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if p.returncode != 0:
        raise ABError(f"git {' '.join(args)}: {p.stderr.strip().splitlines()[-1] if p.stderr.strip() else 'failed'}")
    return p.stdout.strip()


@contextmanager
def checked_out(repo: Path, refs: tuple[str, str]) -> Iterator[list[Side]]:
    """Worktrees (detached) and private installs of both refs; always cleaned up."""
    if not (repo / ".git").exists():
        raise ABError(f"{repo} is not a git repository (use --repo PATH)")
    work = Path(tempfile.mkdtemp(prefix="specdec-ab-"))
    sides: list[Side] = []
    try:
        for name, ref in zip(("A", "B"), refs, strict=True):
            commit = _git(repo, "rev-parse", "--verify", f"{ref}^{{commit}}")
            tree = work / f"wt-{name}"
            _git(repo, "worktree", "add", "--detach", str(tree), commit)
            site = work / f"site-{name}"
            p = subprocess.run(
                [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                 "--target", str(site), str(tree)],
                capture_output=True, text=True,
            )  # fmt: skip
            if p.returncode != 0:
                raise ABError(f"side {name} ({ref}): installing its code failed: {p.stderr.strip()[-300:]}")
            sides.append(Side(name, ref, commit, tree, site))
        yield sides
    finally:
        for side in sides:
            subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", str(side.worktree)],
                           capture_output=True)  # fmt: skip
        subprocess.run(["git", "-C", str(repo), "worktree", "prune"], capture_output=True)
        shutil.rmtree(work, ignore_errors=True)


def run_side(side: Side, run_args: list[str], out_root: Path) -> Path:
    """`specdec-eval run` with that side's code; returns its run folder."""
    cmd, env = side_command(side, run_args, out_root)
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    return side_result(side, p.returncode, p.stdout, p.stderr)


def start_side(side: Side, run_args: list[str], out_root: Path) -> subprocess.Popen:
    """The same run, started and left running (a sequential A/B runs both sides at once)."""
    cmd, env = side_command(side, run_args, out_root)
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def side_command(side: Side, run_args: list[str], out_root: Path) -> tuple[list[str], dict[str, str]]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(side.site), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env[SOURCE_DIR_ENV] = str(side.worktree)
    # `python -m` would put the current folder first on sys.path; inside a checkout that would import the
    # checkout's code instead of this side's (Python >= 3.11 honours PYTHONSAFEPATH).
    env["PYTHONSAFEPATH"] = "1"
    cmd = [sys.executable, "-m", "specdec_eval.cli.main", "run", *run_args, "--out", str(out_root), "--fresh",
           "--json"]  # fmt: skip
    return cmd, env


def side_result(side: Side, returncode: int, stdout: str, stderr: str) -> Path:
    """The run folder a finished side reported, or ABError naming its last error line."""
    try:
        summary = json.loads(stdout[stdout.index("{") :])
    except ValueError:
        tail = (stderr.strip().splitlines() or ["no output"])[-1]
        raise ABError(
            f"side {side.name} ({side.ref} = {side.commit[:10]}): run failed (exit {returncode}): {tail}"
        ) from None
    return Path(summary["run_dir"])
