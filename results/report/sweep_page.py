"""A sweep's page: the grid as a table (one row per cell: its values, verdict, acceptance against the base with
its p-value, output identity, its own run's gates and events, why it failed) and a heatmap of the acceptance change
per cell, marked with its verdict. Self-contained like the run report (`html_page`): the heatmap is an embedded
PNG, every string from the sweep escaped (in the HTML, and in the plot, where a label such as `$\\foo$` is text, not
mathtext). Reads the sweep's grid.json values only (results/ reads, never runs).

The sweep's verdict (`sweep_verdict`) is PASS only when every cell is the base or passes: a cell that FAILs, did not
run (NOT-RUN) or could not be judged (UNJUDGED: its base FAILed or did not run) makes it FAIL, named with its
reason."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from .html_page import _CSP, _CSS, _badge, _e, _img, _table
from .plots import _figure, _png


def heatmap(axes: Sequence[str], cells: Sequence[Mapping[str, Any]]) -> str | None:
    """Rows: the values of every axis but the last; columns: the last axis's. Colour: acceptance change vs the base
    (red: lower); text: the change and the verdict. None when no cell has a change to show (or only the base)."""
    if not cells or not axes:
        return None
    col_axis, row_axes = axes[-1], axes[:-1]
    cols = list(dict.fromkeys(c["labels"][col_axis] for c in cells))
    rows = list(dict.fromkeys(" ".join(f"{a}={c['labels'][a]}" for a in row_axes) or "all" for c in cells))
    import numpy as np

    grid = np.full((len(rows), len(cols)), np.nan)
    text = [["" for _ in cols] for _ in rows]
    for c in cells:
        r = rows.index(" ".join(f"{a}={c['labels'][a]}" for a in row_axes) or "all")
        k = cols.index(c["labels"][col_axis])
        change = 0.0 if c["verdict"] == "BASE" else c.get("acceptance_change")
        if change is not None:
            grid[r, k] = change * 100
        shown = "base" if c["verdict"] == "BASE" else ("n/a" if change is None else f"{change:+.1%}")
        text[r][k] = f"{shown}\n{c['verdict']}"
    span = max(5.0, float(np.nanmax(np.abs(grid)))) if not np.all(np.isnan(grid)) else 5.0
    fig = _figure(1.6 + 1.5 * len(cols), 0.9 + 0.6 * len(rows))
    ax = fig.add_subplot(1, 1, 1)
    image = ax.imshow(grid, cmap="RdBu", vmin=-span, vmax=span, aspect="auto")
    ax.set_xticks(range(len(cols)), [f"{col_axis}={v}" for v in cols], parse_math=False)
    ax.set_yticks(range(len(rows)), rows, parse_math=False)
    for r, line in enumerate(text):
        for k, t in enumerate(line):
            weight = "bold" if t.endswith("FAIL") else "normal"
            dark = not np.isnan(grid[r, k]) and abs(grid[r, k]) > span / 2  # white text on a deep colour
            colour = "white" if dark else "black"
            ax.text(k, r, t, ha="center", va="center", fontsize=8, fontweight=weight, color=colour, parse_math=False)
    fig.colorbar(image, ax=ax, label="acceptance length vs base (%)")
    ax.set_title("Acceptance change against the base cell, and each cell's verdict", fontsize=9)
    return _png(fig)


def _cells_table(axes: Sequence[str], cells: Sequence[Mapping[str, Any]]) -> str:
    head = [*axes, "verdict", "AL", "AL vs base", "p (drop)", "outputs identical", "run", "gates", "events", "why"]
    rows = []
    for c in cells:
        gates = "; ".join(
            f"{task}: " + ", ".join(f"{g} {v}" for g, v in gs.items()) for task, gs in (c.get("gates") or {}).items()
        )
        same = "—" if c.get("outputs_compared") is None else f"{c['outputs_identical']} / {c['outputs_compared']}"
        rows.append(
            [
                *(_e(c["labels"].get(a, "")) for a in axes),
                _badge(c["verdict"]),
                "—" if c.get("acceptance_length") is None else f"{c['acceptance_length']:.3f}",
                "—" if c.get("acceptance_change") is None else f"{c['acceptance_change']:+.1%}",
                "—" if c.get("acceptance_p") is None else f"{c['acceptance_p']:.3g}",
                same,
                _badge(c["run_verdict"]) if c.get("run_verdict") else _e(c.get("status", "")),
                _e(gates or "—"),
                _e(", ".join(f"{k} {v}" for k, v in (c.get("events") or {}).items()) or "none"),
                _e("; ".join(c.get("reasons") or []) if c["verdict"] != "BASE" else "the base cell"),
            ]
        )
    n = len(axes)
    return _table(head, rows, numeric={n + 2, n + 3, n + 4})


_PASSING = ("BASE", "PASS")


def sweep_verdict(cells: Sequence[Mapping[str, Any]]) -> tuple[str, str]:
    """(PASS or FAIL, one line naming every cell that keeps the sweep from passing, with its reason)."""
    if not cells:
        return "FAIL", "no cell was recorded"
    bad = [c for c in cells if c["verdict"] not in _PASSING]
    if not bad:
        return "PASS", f"every cell of {len(cells)} judged against the base passes"
    counts = {v: sum(c["verdict"] == v for c in bad) for v in dict.fromkeys(c["verdict"] for c in bad)}
    head = ", ".join(f"{n} {v}" for v, n in counts.items())
    named = "; ".join(f"{c['cell']}: {c['verdict']} ({'; '.join(c.get('reasons') or []) or c['status']})" for c in bad)
    return "FAIL", f"{head} of {len(cells)} cells: {named}"


def render_sweep_html(result: Mapping[str, Any]) -> str:
    axes, cells = list(result["axes"]), list(result["cells"])
    verdict, summary = sweep_verdict(cells)
    plot = heatmap(axes, cells)
    generated = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">',
        f"<title>specdec-eval sweep: {_e(verdict)}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>specdec-eval sweep {_badge(verdict)}</h1>",
        f'<p class="banner">{_e(summary)}</p>',
        f'<p class="note">Axes: {_e(", ".join(axes))}; base cell: {_e(cells[0]["cell"] if cells else "—")}; '
        f"generated {_e(generated)}. Each cell is judged against the base on the same documents: greedy outputs "
        "token for token, acceptance paired by document (p: the swap test's one-sided p-value of a drop), and "
        "its own run's gates.</p>",
        "<h2>Heatmap</h2>",
        _img(plot, "acceptance change per cell") if plot else '<p class="note">No cell to plot.</p>',
        "<h2>Grid</h2>",
        _cells_table(axes, cells),
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"
