"""`specdec-eval runs | compare | decide`: list recorded runs, compare two of them, recommend waive / unwaive."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from ..errors import UserError
from ..results.compare import REGRESSION, compare_runs, render_compare
from ..results.decide import apply_decision
from ..results.decide import decide as decide_test
from ..results.printable import printable
from ..results.run_summary import Verdict
from ..results.runs_table import format_tasks, gate_verdicts, runs_table
from ..results.store import DEFAULT_ROOT, open_run

Out = Annotated[
    Path | None,
    typer.Option(
        "--out",
        help=f"The run store `run --out` writes to: one folder per run (default: {DEFAULT_ROOT}).",
        file_okay=False,
        show_default=False,
    ),
]
# The old name of --out, kept working for scripts and hidden from --help.
LegacyRoot = Annotated[Path | None, typer.Option("--root", hidden=True, file_okay=False)]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")]
GpuFilter = Annotated[
    str | None,
    typer.Option("--gpu", help="Short GPU name as the runs table shows it (H200, RTX_4090, CPU, ...)."),
]

# Docstrings become --help, rendered as rich markup: '\\[' keeps a test id's '[...]' from being read as a tag.


def _store(out: Path | None, root: Path | None) -> Path:
    """The run store from --out, or from its old name --root."""
    if out is not None and root is not None and out != root:
        raise UserError(f"--root is the old name of --out; give one of them (got --out {out} and --root {root})")
    return out or root or Path(DEFAULT_ROOT)


def _check_root(root: Path) -> None:
    if not root.is_dir():
        raise UserError(f"no run store at {root} (--out)")


def _warn_unreadable(unreadable: list[dict[str, Any]]) -> None:
    for u in unreadable:
        print(f"warning: cannot read run {printable(u['path'])}: {printable(u['reason'])}", file=sys.stderr)


def runs(
    out: Out = None,
    test_id: Annotated[str | None, typer.Option("--test-id", help="Only runs of exactly this test id.")] = None,
    commit: Annotated[str | None, typer.Option("--commit", help="Only runs of commits starting with this.")] = None,
    gpu: GpuFilter = None,
    as_json: AsJson = False,
    root: LegacyRoot = None,
) -> None:
    """List recorded runs, oldest first: id, start time, commit (* = dirty tree), test id, GPU, task scores,
    verdict, failing events. Unfinished runs show as 'unfinished' ('running' while a process writes them).
    Runs that cannot be read (a broken manifest, a cut-off summary) get one warning line each on stderr, and
    their own "unreadable" list under --json ({"runs": [...], "unreadable": [...]}).

    Examples:
      specdec-eval runs --gpu H200
      specdec-eval runs --out /data/runs --commit 1a2b3c
      specdec-eval runs --test-id "accuracy/test_specdec.py::TestSmolLM2_135M::test_eagle3\\[v2_kv_cache-one_model-tp1]" --json
    """  # noqa: E501
    root = _store(out, root)
    _check_root(root)
    try:
        table = runs_table(root, test_id=test_id, commit=commit, gpu=gpu)
    except OSError as e:
        raise UserError(f"cannot read the run store {root}: {e.strerror or e}") from None
    rows = table.rows
    _warn_unreadable(table.unreadable)
    if as_json:
        print(json.dumps({"runs": rows, "unreadable": table.unreadable}, indent=2))
        return
    if not rows:
        print(f"no runs under {root} match", file=sys.stderr)
        return
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table(box=None, pad_edge=False)
    for name in ("RUN", "STARTED", "COMMIT", "TEST", "GPU", "TASKS", "VERDICT", "FAILING"):
        table.add_column(name, overflow="fold", no_wrap=name not in ("TEST", "TASKS"), min_width=len(name))
    for row in rows:
        failing = ", ".join(f"{k} {v}" for k, v in row["failing_events"].items()) or "0"
        verdict = "running" if row.get("live") else row["verdict"] or "?"
        style = {Verdict.PASS: "green", Verdict.FAIL: "red"}.get(verdict, "yellow")
        started = (row["started"] or "?").replace("T", " ").removesuffix("Z")
        # What a hand-edited manifest holds is shown escaped (no escape sequence reaches the terminal raw), and
        # rich markup in it is escaped too.
        cells = [
            printable(c)
            for c in (row["run_id"], started, row["commit"], row["test_id"] or "?", row["gpu"], format_tasks(row))
        ]
        cells[-1] = cells[-1].replace(", ", "\n")
        verdict_cell = f"[{style}]{escape(printable(verdict))}[/{style}]"
        table.add_row(*map(escape, cells), verdict_cell, escape(printable(failing)))
    console = Console()
    if not console.is_terminal:  # piped: no terminal width to fit, so do not fold rows at 80 columns
        console = Console(width=1000)
    console.print(table)


def compare(
    run_a: Annotated[str, typer.Argument(help="Baseline run: folder path, or id (or unique id prefix) under --out.")],
    run_b: Annotated[str, typer.Argument(help="Run compared against the baseline.")],
    out: Out = None,
    alpha: Annotated[
        float, typer.Option("--alpha", min=0.0, max=1.0, help="Significance level of the McNemar test, in (0, 1).")
    ] = 0.05,
    filter_name: Annotated[
        str, typer.Option("--filter", help="Correctness the test uses: flexible-extract | strict-match.")
    ] = "flexible-extract",
    acceptance_drop: Annotated[
        float,
        typer.Option(
            "--acceptance-drop",
            min=0.001,
            max=0.999,
            help="Relative AL drop the paired acceptance test rules out at beta 0.2 (0.05: min_al's 5 %).",
        ),
    ] = 0.05,
    as_json: AsJson = False,
    root: LegacyRoot = None,
) -> None:
    """Compare run B against run A sample by sample: accuracy deltas, exact McNemar test on the discordant pairs,
    token-identical outputs and first divergence positions, acceptance length (overall, and its relative change
    paired by document: a paired t on the cycle-weighted AL ratio with documents as clusters; a drop shown at
    --alpha is flagged as ACCEPTANCE DROP, a drop of --acceptance-drop ruled out is said, and otherwise what this
    many documents could see), event counts, and which configuration and environment keys differ. Exit status 1
    when B is a significant accuracy regression.

    Examples:
      specdec-eval compare 20261202-175148 20261202-175223
      specdec-eval compare runs/20261202-175148-5923a6aaaf41 runs/20261202-175223-be62dbafdf8f --json
    """
    if not 0.0 < alpha < 1.0:
        raise UserError(f"--alpha must be between 0 and 1, got {alpha}")
    root = _store(out, root)
    try:
        a, b = open_run(run_a, root), open_run(run_b, root)
        result = compare_runs(a, b, alpha=alpha, filter=filter_name, acceptance_drop=acceptance_drop)
    except (FileNotFoundError, ValueError) as e:
        raise UserError(str(e)) from None
    text = json.dumps(result, indent=2) if as_json else render_compare(result)
    print("\n".join(printable(line) for line in text.split("\n")))  # manifests' text shown escaped
    if result["verdict"] == REGRESSION:
        raise typer.Exit(1)


def decide(
    test_id: Annotated[str, typer.Argument(help="The test id, as the runs' manifests and waives.txt name it.")],
    gpu: GpuFilter = None,
    out: Out = None,
    waives: Annotated[Path, typer.Option("--waives", help="The waives file.", dir_okay=False)] = Path("waives.txt"),
    k: Annotated[int, typer.Option("--k", help="Passing runs in a row needed to lift a waive.", min=1)] = 3,
    apply: Annotated[bool, typer.Option("--apply", help="Edit the waives file as recommended.")] = False,
    bug: Annotated[
        str | None, typer.Option("--bug", help="Bug URL for a new waive line (default: the failure signature).")
    ] = None,
    as_json: AsJson = False,
    root: LegacyRoot = None,
) -> None:
    """Recommend waive / unwaive / keep for a test from its recorded runs, with the reason and the runs behind it.

    Waive: the newest run fails (verdict, task verdict, lossless gate, a spec_state_leak / request_failed event).
    Unwaive: the test is waived and the --k newest runs all pass (a task's NO-GATE and REPORT count as passing
    where another gate passed; a run no gate could fail is NO-GATE itself and is left out).
    Keep: anything else. Without --gpu, runs on any GPU count and only waives without 'full:' are edited.
    A run that cannot be read (broken manifest, cut-off summary) and may be of this test is named on stderr; one
    not older than the passing runs keeps the waive (it may be the failure).

    Examples:
      specdec-eval decide "accuracy/test_specdec.py::TestSmolLM2_135M::test_eagle3\\[v2_kv_cache-one_model-tp1]" --gpu H200
      specdec-eval decide "accuracy/test_specdec.py::TestSmolLM2_135M::test_auto_dtype\\[v1_kv_cache-tp1]" --gpu H200
      --apply --bug https://nvbugs/123
    """  # noqa: E501
    root = _store(out, root)
    _check_root(root)
    if waives.is_dir():
        raise UserError(f"waives file is a directory: {waives}")
    try:
        decision = decide_test(test_id, gpu, root, waives, k=k)
        changed = apply_decision(decision, waives, bug) if apply else []
    except (OSError, ValueError) as e:
        raise UserError(str(e)) from None
    if not waives.exists() and not changed:
        print(f"note: {waives} does not exist; the test counts as not waived", file=sys.stderr)
    _warn_unreadable(decision.unreadable)
    if as_json:
        print(json.dumps({**decision.to_dict(), "applied": changed}, indent=2))
        return
    print("\n".join(printable(line) for line in _render_decision(decision).split("\n")))
    if apply:
        print(f"{waives}: " + ("; ".join(changed) if changed else "unchanged"))


def _render_decision(d: Any) -> str:
    where = f" on {d.gpu}" if d.gpu else " on any GPU"
    lines = [f"{d.action.upper()}: {d.test_id}{where}", f"reason: {d.reason}"]
    lines.append("waived: " + ("; ".join(d.waive_lines) if d.currently_waived else "no"))
    if d.evidence:
        lines.append("evidence (newest first):")
    for e in d.evidence:
        tasks = ", ".join(
            f"{n} {_fmt(t['score'])}"
            + (f"/thr {_fmt(t['threshold'])}" if t["threshold"] is not None else "")
            + f" {t['verdict']}"
            + gate_verdicts(t)
            for n, t in e["tasks"].items()
        )
        failing = ", ".join(f"{k} {v}" for k, v in e["failing_events"].items()) or "no failing events"
        lines.append(f"  {e['run_id']}  {e['commit']}  {e['gpu']}  {e['verdict']}  {tasks}  {failing}")
    return "\n".join(lines)


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}"
