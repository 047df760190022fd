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
    early_stop: Annotated[
        bool,
        typer.Option(
            "--early-stop",
            help="Sequential A/B: both sides at once, documents in a seeded random order, "
            "stopped as soon as the sequential test on the discordant pairs decides (B worse, or no "
            "difference shown); both commits must have this feature.",
        ),
    ] = False,  # fmt: skip
    early_stop_batch: Annotated[int, typer.Option("--early-stop-batch", min=1, help="Documents per look.")] = 32,
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
    from ..results.ab import ABError, Terminated, checked_out, run_side, terminated_as_exception
    from ..results.compare import compare_runs, render_compare
    from ..results.store import Run

    if not 0.0 < alpha < 1.0:  # checked now: both sides would run before the comparison reads it
        raise UserError(f"--alpha must be between 0 and 1 (exclusive), got {alpha:g}")
    run_args = list(ctx.args)
    if any(a in ("--out", "--resume", "--fresh", "--json") or a.startswith("--out=") for a in run_args):
        raise UserError("ab sets --out, --fresh and --json for both sides itself; leave them out after --")
    sequential = None
    try:
        with terminated_as_exception(), checked_out(repo.resolve(), (ref_a, ref_b)) as sides:
            if early_stop:
                runs, sequential = _sequential(sides, run_args, Path(out).resolve(), early_stop_batch, alpha, p1)
            else:
                runs = []
                for side in sides:
                    typer.echo(f"side {side.name}: {side.ref} = {side.commit[:12]}: running", err=True)
                    runs.append(Run(run_side(side, run_args, Path(out).resolve())))
    except ABError as e:
        raise UserError(str(e)) from None
    except Terminated as e:  # the running side was stopped and waited for; worktrees and temporary files are gone
        typer.echo(f"specdec-eval: ab {e}: the running side was stopped, worktrees and temporary files removed",
                   err=True)  # fmt: skip
        raise typer.Exit(128 + e.signum) from None
    result = compare_runs(runs[0], runs[1], alpha=alpha)
    if sequential is not None:
        result["sequential"] = sequential
    if json_out:
        typer.echo(json.dumps(result, indent=2, default=str))
    else:
        typer.echo(render_compare(result))
        if sequential is not None:
            from ..evals.sequential.ab import render

            typer.echo(render(sequential))
    if result.get("verdict") == "regression":
        raise typer.Exit(1)


def _sequential(sides, run_args: list[str], out: Path, batch: int, alpha: float, p1: float):
    """Both sides at once, each a passive sequential run; the controller stops them when the paired test decides."""
    import tempfile

    from ..evals.sequential.ab import SideProgress, watch
    from ..evals.sequential.paired import PairedSequentialDesign
    from ..results.ab import side_result, start_side, stop_side
    from ..results.store import Run

    with tempfile.TemporaryDirectory(prefix="specdec-ab-seq-") as tmp:
        progress = {s.name: SideProgress(Path(tmp) / f"side-{s.name}.stop") for s in sides}
        procs = {}
        for side in sides:
            args = [*run_args, "--ab-stop-file", str(progress[side.name].stop_file), "--early-stop-batch", str(batch)]
            typer.echo(f"side {side.name}: {side.ref} = {side.commit[:12]}: running (sequential)", err=True)
            procs[side.name] = start_side(side, args, out)
        # Output is collected by threads, so a side's full pipe never blocks it while the controller polls.
        import threading

        outputs: dict[str, tuple[str, str]] = {}

        def drain(name: str, proc) -> None:
            outputs[name] = proc.communicate()

        threads = [threading.Thread(target=drain, args=(n, p), daemon=True) for n, p in procs.items()]
        for t in threads:
            t.start()
        design = PairedSequentialDesign(alpha=alpha, p1=p1)
        try:
            record = watch(progress, design, lambda: any(t.is_alive() for t in threads))
            for t in threads:
                t.join()
        except BaseException as e:  # Terminated, KeyboardInterrupt: both sides stop with ab
            import signal

            for proc in procs.values():
                stop_side(proc, getattr(e, "signum", signal.SIGINT))
            raise
        runs = [Run(side_result(s, procs[s.name].returncode, *outputs[s.name])) for s in sides]
    return runs, record
