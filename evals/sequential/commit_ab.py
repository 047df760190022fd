"""The A/B of two commits as a library call (`specdec-eval ab` parses its options, calls `run_ab`, prints).

Each side is its own commit's `specdec-eval run` in a git worktree (`ab_sides` makes the worktrees and the side
processes). Fixed-sample: the sides run one after the other. Sequential (`early_stop`): both at once, their output
drained by threads so that a full pipe never blocks a side, while the watcher (`ab_watch`) pairs their scores and
acceptance counts and stops both when the paired tests decide (`decide_on`: the accuracy SPRT, the sequential acceptance
test, or both); a signal to ab stops both sides too. The two runs are then compared sample by sample (`compare`),
acceptance paired by document included.

Lives here, beside the sequential designs, rather than in results, because it drives the sequential controller and
results imports nothing from evals."""

from __future__ import annotations

import signal
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...results.ab_sides import Side, checked_out, run_side, side_result, start_side, stop_side, terminated_as_exception
from ...results.compare import compare_runs
from ...results.store import Run
from ...stats.acceptance_ratio import DEFAULT_BETA, DEFAULT_DROP
from ..run_types import EvalOptions
from .ab_watch import DECIDE_ON, AcceptanceMonitor, SideProgress, watch
from .discordant_pairs import PairedSequentialDesign


@dataclass(frozen=True)
class ABPlan:
    """What `ab` compares: two refs of one repository, the same `run` arguments on each, and the test's settings."""

    repo: Path
    refs: tuple[str, str]
    run_args: tuple[str, ...]
    out: Path
    alpha: float = 0.05
    early_stop: bool = False
    early_stop_batch: int = EvalOptions.early_stop_batch  # what `run` looks after, so both sides look alike
    p1: float = 1 / 3
    acceptance_drop: float = DEFAULT_DROP  # the relative AL drop the acceptance tests rule out (or show)
    beta: float = DEFAULT_BETA  # the acceptance tests' chance of ruling out a drop of acceptance_drop that is there
    decide_on: str = "both"  # what stops a sequential A/B: both tests, the accuracy SPRT, or the acceptance test

    def __post_init__(self) -> None:
        if self.decide_on not in DECIDE_ON:
            raise ValueError(f"decide_on must be one of {', '.join(DECIDE_ON)}, got {self.decide_on!r}")
        if not (0 < self.acceptance_drop < 1 and 0 < self.beta < 1):
            raise ValueError(f"acceptance_drop and beta must lie in (0, 1), got {self.acceptance_drop}, {self.beta}")


def run_ab(plan: ABPlan, say: Callable[[str], None]) -> dict[str, Any]:
    """Both sides, then their comparison (with the sequential record under "sequential" when early_stop).
    Raises results.ab_sides.ABError (a side failed, a ref is unknown) and Terminated (a signal: the running sides were
    stopped and waited for, worktrees and temporary files removed). `say` gets one line per side started."""
    sequential = None
    with terminated_as_exception(), checked_out(plan.repo.resolve(), plan.refs) as sides:
        if plan.early_stop:
            runs, sequential = _sequential(sides, plan, say)
        else:
            runs = []
            for side in sides:
                say(f"side {side.name}: {side.ref} = {side.commit[:12]}: running")
                runs.append(Run(run_side(side, list(plan.run_args), plan.out.resolve())))
    result = compare_runs(runs[0], runs[1], alpha=plan.alpha, acceptance_drop=plan.acceptance_drop, beta=plan.beta)
    if sequential is not None:
        result["sequential"] = sequential
    return result


def _sequential(sides: list[Side], plan: ABPlan, say: Callable[[str], None]) -> tuple[list[Run], dict[str, Any]]:
    """Both sides at once, each a passive sequential run; the controller stops them when the paired test decides."""
    out = plan.out.resolve()
    with tempfile.TemporaryDirectory(prefix="specdec-ab-seq-") as tmp:
        progress = {s.name: SideProgress(Path(tmp) / f"side-{s.name}.stop") for s in sides}
        procs = {}
        for side in sides:
            args = [
                *plan.run_args,
                "--ab-stop-file",
                str(progress[side.name].stop_file),
                "--early-stop-batch",
                str(plan.early_stop_batch),
            ]
            say(f"side {side.name}: {side.ref} = {side.commit[:12]}: running (sequential)")
            procs[side.name] = start_side(side, args, out)
        outputs: dict[str, tuple[str, str]] = {}

        def drain(name: str, proc) -> None:
            outputs[name] = proc.communicate()

        threads = [threading.Thread(target=drain, args=(n, p), daemon=True) for n, p in procs.items()]
        for t in threads:
            t.start()
        design = PairedSequentialDesign(alpha=plan.alpha, p1=plan.p1)
        acceptance = AcceptanceMonitor(plan.early_stop_batch, plan.acceptance_drop, plan.alpha, plan.beta)
        try:
            record = watch(
                progress,
                design,
                lambda: any(t.is_alive() for t in threads),
                acceptance=acceptance,
                decide_on=plan.decide_on,
            )
            for t in threads:
                t.join()
        except BaseException as e:  # Terminated, KeyboardInterrupt: both sides stop with ab
            for proc in procs.values():
                stop_side(proc, getattr(e, "signum", signal.SIGINT))
            raise
        runs = [Run(side_result(s, procs[s.name].returncode, *outputs[s.name])) for s in sides]
    return runs, record
