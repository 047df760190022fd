"""`specdec-eval ab REF_A REF_B`: the same evaluation on two commits, each from its own git worktree, compared."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from ..errors import UserError
from ..evals.run_types import EvalOptions, RunPlan
from ..evals.sequential.ab_watch import DECIDE_ON
from ..option_fields import flag_of, option
from ..stats.acceptance_ratio import DEFAULT_BETA, DEFAULT_DROP
from . import options as o


@dataclass(frozen=True)
class ABOptions:
    """`ab`'s options; --out and --early-stop-batch are `run`'s, by reference: both sides of an A/B are `run`s."""

    repo: Path = option(Path("."), "--repo", help="The git repository holding both refs.")
    out: str = flag_of(RunPlan, "out", help="Runs folder for both sides' runs.", group=None)
    alpha: float = option(0.05, "--alpha", help="Significance level of the paired test.")
    early_stop: bool = option(
        False,
        "--early-stop",
        help="Sequential A/B: both sides at once, documents in a seeded random order, "
        "stopped as soon as the sequential tests decide (see --decide-on): the SPRT on the discordant pairs "
        "(B worse, or no difference shown) and, when both sides speculate, the acceptance test paired by "
        "document (a drop of B's AL shown, or a drop of --acceptance-drop ruled out); both commits must have "
        "this feature.",
    )
    early_stop_batch: int = flag_of(EvalOptions, "early_stop_batch", help="Documents per look.", group=None)
    p1: float = option(
        1 / 3,
        "--p1",
        min=0.01,
        max=0.49,
        help="Sequential A/B: the share of discordant pairs B wins under "
        "the alternative (1/3: B loses two of three disagreements).",
    )
    acceptance_drop: float = option(
        DEFAULT_DROP,
        "--acceptance-drop",
        help="The relative AL drop the paired acceptance test rules out at --beta "
        "(0.05: min_al = 0.95 ref_al); a drop of any size is shown at --alpha.",
    )
    beta: float = option(
        DEFAULT_BETA,
        "--beta",
        help="The paired acceptance test's chance of ruling out a drop of --acceptance-drop that is there.",
    )
    decide_on: str = option(
        "both",
        "--decide-on",
        help="Sequential A/B: what stops the sides. both: either test showing B worse, else both tests "
        "decided; accuracy: the SPRT alone; acceptance: the acceptance test alone (greedy outputs that stay "
        "identical give the SPRT no discordant pair to decide on).",
    )
    json_out: bool = option(False, "--json", help="Print the comparison as JSON.")


@o.dataclass_options(opts=ABOptions)
def ab(
    ctx: typer.Context,
    ref_a: Annotated[str, typer.Argument(help="Commit, branch or tag for side A (the baseline).")],
    ref_b: Annotated[str, typer.Argument(help="Commit, branch or tag for side B (the candidate).")],
    *,
    opts: ABOptions,
) -> None:
    """Run the same `specdec-eval run` arguments (everything after --) on two commits and compare them.

    Each side runs its own commit's code from a git worktree (its manifest records that commit), with the same
    configuration and samples; then both runs are paired sample by sample: output identity, accuracy deltas with
    the exact McNemar test, acceptance paired by document, event deltas. Worktrees are removed afterwards. Exit
    status 1 on a significant regression: of accuracy, or a drop of B's acceptance shown.

    Examples:
      specdec-eval ab main HEAD -- --tasks gsm8k --limit 200 --data-dir ../shared/data --spec eagle3
      specdec-eval ab v0.1.0 my-branch --repo ~/specdec-eval -- --model tiny --tasks gsm8k_smoke --no-reference
      specdec-eval ab main HEAD --early-stop -- --tasks gsm8k --data-dir ../shared/data   # stops when decided
      specdec-eval ab main HEAD --early-stop --decide-on acceptance --early-stop-batch 8 -- --tasks gsm8k \
          --limit 200 --sample random --spec eagle3 --data-dir ../shared/data   # a quiet drafter regression
    """
    from ..evals.sequential.commit_ab import ABPlan, run_ab
    from ..results.ab_sides import ABError, Terminated
    from ..results.compare import render_compare

    for name, value in (("--alpha", opts.alpha), ("--acceptance-drop", opts.acceptance_drop), ("--beta", opts.beta)):
        if not 0.0 < value < 1.0:  # checked now: both sides would run before the comparison reads it
            raise UserError(f"{name} must be between 0 and 1 (exclusive), got {value:g}")
    if opts.decide_on not in DECIDE_ON:
        raise UserError(f"--decide-on must be one of {', '.join(DECIDE_ON)}, got {opts.decide_on!r}")
    run_args = list(ctx.args)
    if any(a in ("--out", "--resume", "--fresh", "--json") or a.startswith("--out=") for a in run_args):
        raise UserError("ab sets --out, --fresh and --json for both sides itself; leave them out after --")
    plan = ABPlan(
        opts.repo,
        (ref_a, ref_b),
        tuple(run_args),
        Path(opts.out),
        opts.alpha,
        opts.early_stop,
        opts.early_stop_batch,
        opts.p1,
        acceptance_drop=opts.acceptance_drop,
        beta=opts.beta,
        decide_on=opts.decide_on,
    )
    try:
        result = run_ab(plan, lambda line: typer.echo(line, err=True))
    except ABError as e:
        raise UserError(str(e)) from None
    except Terminated as e:  # the running side was stopped and waited for; worktrees and temporary files are gone
        typer.echo(
            f"specdec-eval: ab {e}: the running side was stopped, worktrees and temporary files removed", err=True
        )
        raise typer.Exit(128 + e.signum) from None
    sequential = result.get("sequential")
    if opts.json_out:
        typer.echo(json.dumps(result, indent=2, default=str))
    else:
        typer.echo(render_compare(result))
        if sequential is not None:
            from ..evals.sequential.ab_watch import render

            typer.echo(render(sequential))
    if result.get("verdict") == "regression" or result.get("acceptance_drops"):
        raise typer.Exit(1)
