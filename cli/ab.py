"""`specdec-eval ab REF_A REF_B`: the same evaluation on two commits, each from its own git worktree, compared."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from ..errors import UserError
from ..evals.run_types import EvalOptions, RunPlan
from . import options as o

# Shared with `run` (evals/run_types.py), default included: both sides of an A/B are `run`s.
Out, OUT = o.option_of(RunPlan, "out", help="Runs folder for both sides' runs.", group=None)
EarlyStopBatch, EARLY_STOP_BATCH = o.option_of(EvalOptions, "early_stop_batch", help="Documents per look.", group=None)


def ab(
    ctx: typer.Context,
    ref_a: Annotated[str, typer.Argument(help="Commit, branch or tag for side A (the baseline).")],
    ref_b: Annotated[str, typer.Argument(help="Commit, branch or tag for side B (the candidate).")],
    repo: Annotated[Path, typer.Option("--repo", help="The git repository holding both refs.")] = Path("."),
    out: Out = OUT,
    alpha: Annotated[float, typer.Option("--alpha", help="Significance level of the paired test.")] = 0.05,
    early_stop: Annotated[
        bool,
        typer.Option(
            "--early-stop",
            help="Sequential A/B: both sides at once, documents in a seeded random order, "
            "stopped as soon as the sequential test on the discordant pairs decides (B worse, or no "
            "difference shown); both commits must have this feature.",
        ),
    ] = False,  # fmt: skip
    early_stop_batch: EarlyStopBatch = EARLY_STOP_BATCH,
    p1: Annotated[
        float,
        typer.Option(
            "--p1",
            min=0.01,
            max=0.49,
            help="Sequential A/B: the share of discordant pairs B wins under "
            "the alternative (1/3: B loses two of three disagreements).",
        ),
    ] = 1 / 3,  # fmt: skip
    json_out: Annotated[bool, typer.Option("--json", help="Print the comparison as JSON.")] = False,
) -> None:
    """Run the same `specdec-eval run` arguments (everything after --) on two commits and compare them.

    Each side runs its own commit's code from a git worktree (its manifest records that commit), with the same
    configuration and samples; then both runs are paired sample by sample: output identity, accuracy deltas with
    the exact McNemar test, acceptance and event deltas. Worktrees are removed afterwards. Exit status 1 on a
    significant regression.

    Examples:
      specdec-eval ab main HEAD -- --tasks gsm8k --limit 200 --data-dir ../shared/data --spec eagle3
      specdec-eval ab v0.1.0 my-branch --repo ~/specdec-eval -- --model tiny --tasks gsm8k_smoke --no-reference
      specdec-eval ab main HEAD --early-stop -- --tasks gsm8k --data-dir ../shared/data   # stops when decided
    """  # fmt: skip
    from ..evals.sequential.commit_ab import ABPlan, run_ab
    from ..results.ab_sides import ABError, Terminated
    from ..results.compare import render_compare

    if not 0.0 < alpha < 1.0:  # checked now: both sides would run before the comparison reads it
        raise UserError(f"--alpha must be between 0 and 1 (exclusive), got {alpha:g}")
    run_args = list(ctx.args)
    if any(a in ("--out", "--resume", "--fresh", "--json") or a.startswith("--out=") for a in run_args):
        raise UserError("ab sets --out, --fresh and --json for both sides itself; leave them out after --")
    plan = ABPlan(repo, (ref_a, ref_b), tuple(run_args), Path(out), alpha, early_stop, early_stop_batch, p1)
    try:
        result = run_ab(plan, lambda line: typer.echo(line, err=True))
    except ABError as e:
        raise UserError(str(e)) from None
    except Terminated as e:  # the running side was stopped and waited for; worktrees and temporary files are gone
        typer.echo(f"specdec-eval: ab {e}: the running side was stopped, worktrees and temporary files removed",
                   err=True)  # fmt: skip
        raise typer.Exit(128 + e.signum) from None
    sequential = result.get("sequential")
    if json_out:
        typer.echo(json.dumps(result, indent=2, default=str))
    else:
        typer.echo(render_compare(result))
        if sequential is not None:
            from ..evals.sequential.ab_watch import render

            typer.echo(render(sequential))
    if result.get("verdict") == "regression":
        raise typer.Exit(1)
