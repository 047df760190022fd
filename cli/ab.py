"""`specdec-eval ab REF_A REF_B`: the same evaluation on two commits, each from its own git worktree, compared."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from ..workers.errors import UserError


def ab(
    ctx: typer.Context,
    ref_a: Annotated[str, typer.Argument(help="Commit, branch or tag for side A (the baseline).")],
    ref_b: Annotated[str, typer.Argument(help="Commit, branch or tag for side B (the candidate).")],
    repo: Annotated[Path, typer.Option("--repo", help="The git repository holding both refs.")] = Path("."),
    out: Annotated[str, typer.Option("--out", help="Runs folder for both sides' runs.")] = "runs",
    alpha: Annotated[float, typer.Option("--alpha", help="Significance level of the paired test.")] = 0.05,
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
    """  # fmt: skip
    from ..results.ab import ABError, checked_out, run_side
    from ..results.compare import compare_runs, render_compare
    from ..results.store import Run

    run_args = list(ctx.args)
    if any(a in ("--out", "--resume", "--fresh", "--json") or a.startswith("--out=") for a in run_args):
        raise UserError("ab sets --out, --fresh and --json for both sides itself; leave them out after --")
    try:
        with checked_out(repo.resolve(), (ref_a, ref_b)) as sides:
            runs = []
            for side in sides:
                typer.echo(f"side {side.name}: {side.ref} = {side.commit[:12]}: running", err=True)
                runs.append(Run(run_side(side, run_args, Path(out).resolve())))
    except ABError as e:
        raise UserError(str(e)) from None
    result = compare_runs(runs[0], runs[1], alpha=alpha)
    if json_out:
        typer.echo(json.dumps(result, indent=2, default=str))
    else:
        typer.echo(render_compare(result))
    if result.get("verdict") == "regression":
        raise typer.Exit(1)
