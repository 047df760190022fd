"""The sides of an A/B of two commits (`specdec-eval ab`): each side runs its own commit's code, from its own git
worktree, with the same configuration and samples; then the two runs are compared.

The code of a side is installed with `pip install --target` from its worktree into a private folder and put
first on PYTHONPATH, so `python -m specdec_eval.cli.main run ...` really runs that commit (the manifest records
it through SPECDEC_EVAL_SOURCE_DIR). Worktrees and installs are removed afterwards, whatever happens.

Termination. Under `terminated_as_exception()` a SIGTERM (or SIGHUP) to `ab` raises `Terminated` in its main thread,
so every `finally` runs: a running side is asked to stop with the same signal, waited for (`STOP_GRACE_S`, then
killed), and the worktrees and the temporary folder are removed; the command then exits non-zero. (By default the
signal would end `ab` at once, leaving the side running, both worktrees registered and the installs in the
temporary folder.)"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

SOURCE_DIR_ENV = "SPECDEC_EVAL_SOURCE_DIR"


STOP_GRACE_S = 30.0  # how long a side may take to stop after the signal is passed on, before it is killed


class ABError(Exception):
    """Something the user can fix (unknown ref, not a repository, a side's run failed): one line."""


class Terminated(Exception):
    """`ab` received SIGTERM or SIGHUP (see `terminated_as_exception`)."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"terminated by {signal.Signals(signum).name}")


@contextmanager
def terminated_as_exception() -> Iterator[None]:
    """SIGTERM and SIGHUP raise `Terminated` in the main thread while the block runs (the previous handlers come
    back afterwards), so that cleanup in `finally` blocks runs instead of the process ending on the spot."""

    def handler(signum: int, frame: object) -> None:
        raise Terminated(signum)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def stop_side(proc: subprocess.Popen, signum: int = signal.SIGTERM, grace_s: float = STOP_GRACE_S) -> None:
    """Pass the signal on to a side still running and wait for it to end (killed after grace_s): no side outlives
    `ab`, and none keeps writing into the run store after it."""
    if proc.poll() is not None:
        return
    try:
        proc.send_signal(signum)
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


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
            pip_tmp = work / "tmp-pip"  # pip's build files too stay inside the folder removed below
            pip_tmp.mkdir(exist_ok=True)
            p = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "install",
                    "--quiet",
                    "--no-deps",
                    "--no-build-isolation",
                    "--target",
                    str(site),
                    str(tree),
                ],
                capture_output=True,
                text=True,
                env={**os.environ, "TMPDIR": str(pip_tmp)},
            )
            if p.returncode != 0:
                raise ABError(f"side {name} ({ref}): installing its code failed: {p.stderr.strip()[-300:]}")
            sides.append(Side(name, ref, commit, tree, site))
        yield sides
    finally:
        for side in sides:
            subprocess.run(
                ["git", "-C", str(repo), "worktree", "remove", "--force", str(side.worktree)], capture_output=True
            )
        subprocess.run(["git", "-C", str(repo), "worktree", "prune"], capture_output=True)
        shutil.rmtree(work, ignore_errors=True)


def run_side(side: Side, run_args: list[str], out_root: Path) -> Path:
    """`specdec-eval run` with that side's code; returns its run folder."""
    proc = start_side(side, run_args, out_root)
    try:
        stdout, stderr = proc.communicate()
    except BaseException as e:  # Terminated, KeyboardInterrupt: the side stops with us
        stop_side(proc, e.signum if isinstance(e, Terminated) else signal.SIGINT)
        raise
    return side_result(side, proc.returncode, stdout, stderr)


def start_side(side: Side, run_args: list[str], out_root: Path) -> subprocess.Popen:
    """The same run, started and left running (a sequential A/B runs both sides at once)."""
    cmd, env = side_command(side, run_args, out_root)
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def side_command(side: Side, run_args: list[str], out_root: Path) -> tuple[list[str], dict[str, str]]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(side.site), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env[SOURCE_DIR_ENV] = str(side.worktree)
    # The side's temporary files go inside ab's own temporary folder, which is removed whatever happens (a side
    # stopped by a signal cannot clean up after itself).
    tmp = side.site.parent / f"tmp-{side.name}"
    tmp.mkdir(parents=True, exist_ok=True)
    env["TMPDIR"] = str(tmp)
    # `python -m` would put the current folder first on sys.path; inside a checkout that would import the
    # checkout's code instead of this side's (Python >= 3.11 honours PYTHONSAFEPATH).
    env["PYTHONSAFEPATH"] = "1"
    cmd = [sys.executable, "-m", "specdec_eval.cli.main", "run", *run_args, "--out", str(out_root), "--fresh", "--json"]
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
