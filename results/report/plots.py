"""The report's plots as base64 PNGs (matplotlib's Agg canvas, no pyplot, so no global state).

A plot with nothing to show is not drawn: each function returns None then, and the page leaves it out.
"""

from __future__ import annotations

import base64
import io
from typing import Any

from ..run_summary import Verdict
from .data import RunData, TaskRow
from .text import acceptance_length

VERDICT_COLOURS = {
    Verdict.PASS: "#1a7f37",
    Verdict.FAIL: "#cf222e",
    Verdict.NO_GATE: "#6e7781",
    Verdict.REPORT: "#0969da",
}
RANK_COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]


def _figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    return fig


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def task_scores(task: str, rows: list[TaskRow], labels: dict[int, str]) -> str | None:
    """Each run's score with its 95% interval against reference and threshold; None when no run has a score."""
    if not any(_is_num(r.info.get("score")) for r in rows):
        return None
    fig = _figure(max(4.5, 1.1 * len(rows) + 2.5), 3.4)
    ax = fig.add_subplot(1, 1, 1)
    xs = list(range(len(rows)))
    refs = {r.info.get("reference") for r in rows}
    ths = {r.info.get("threshold") for r in rows}
    same_ref, same_th = len(refs) == 1, len(ths) == 1
    for x, r in zip(xs, rows, strict=True):
        ref, th = r.info.get("reference"), r.info.get("threshold")
        if _is_num(ref) and not same_ref:
            ax.hlines(ref, x - 0.35, x + 0.35, colors="#444444", linewidth=1.5)
        if _is_num(th) and not same_th:
            ax.hlines(th, x - 0.35, x + 0.35, colors="#cf222e", linestyles="dashed", linewidth=1.3)
    ref, th = next(iter(refs)), next(iter(ths))
    if same_ref and _is_num(ref):
        ax.axhline(ref, color="#444444", linewidth=1.5, label=f"reference {ref:.2f}")
    elif any(_is_num(v) for v in refs):
        ax.plot([], [], color="#444444", linewidth=1.5, label="reference (per run)")
    if same_th and _is_num(th):
        ax.axhline(th, color="#cf222e", linestyle="--", linewidth=1.3, label=f"threshold {th:.2f}")
    elif any(_is_num(v) for v in ths):
        ax.plot([], [], color="#cf222e", linestyle="--", linewidth=1.3, label="threshold (per run)")
    for x, r in zip(xs, rows, strict=True):
        score = r.info.get("score")
        if not _is_num(score):
            continue
        colour = VERDICT_COLOURS.get(str(r.info.get("verdict")), "#6e7781")
        if r.ci is not None:
            lo, hi = r.ci
            yerr = [[max(0.0, score - lo)], [max(0.0, hi - score)]]
            ax.errorbar([x], [score], yerr=yerr, fmt="o", color=colour, ecolor=colour, capsize=5, markersize=7)
        else:
            ax.plot([x], [score], "o", color=colour, markersize=7)
    for verdict in dict.fromkeys(str(r.info.get("verdict")) for r in rows):
        ax.plot([], [], "o", color=VERDICT_COLOURS.get(verdict, "#6e7781"), label=verdict)
    ax.set_xticks(xs)
    ax.set_xticklabels([labels[r.run_index] for r in rows])
    ax.set_xlim(-0.7, len(rows) - 0.3)
    ax.set_ylim(-2, 102)
    ax.set_ylabel("score (0-100), 95% CI")
    ax.set_title(f"{task}: score vs reference and threshold")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    return _png(fig)


def _acceptance_series(run: RunData) -> list[tuple[str, list[float], float | None]]:
    series = []
    for r in run.tasks:
        acc = r.info.get("acceptance")
        if isinstance(acc, dict) and isinstance(acc.get("per_position_rate"), list) and acc["per_position_rate"]:
            rates = [float(v) if _is_num(v) else 0.0 for v in acc["per_position_rate"]]
            series.append((r.task, rates, acceptance_length(r.info)))
    return series


def acceptance(run: RunData) -> str | None:
    """Acceptance rate per draft position, one bar group per task; None for a run without speculative decoding."""
    series = _acceptance_series(run)
    if not series:
        return None
    fig = _figure(6.0, 3.0)
    ax = fig.add_subplot(1, 1, 1)
    ax.set_title(f"{run.label} acceptance per draft position")
    k = max(len(rates) for _, rates, _ in series)
    width = 0.8 / len(series)
    for j, (task, rates, al) in enumerate(series):
        xs = [i + 1 + (j - (len(series) - 1) / 2) * width for i in range(len(rates))]
        label = f"{task} (AL {al:.2f})" if al is not None else task
        bars = ax.bar(xs, rates, width=width, label=label)
        ax.bar_label(bars, fmt="%.2f", fontsize=7, padding=1)
    ax.set_xticks(list(range(1, k + 1)))
    ax.set_xlabel("draft position")
    ax.set_ylabel("acceptance rate")
    ax.set_ylim(0, 1.12)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, fontsize=8, frameon=False)
    return _png(fig)


LENGTH_BINS = 3  # output-length terciles: short, middle, long


def _length_bins(requests: list[tuple[int, dict[str, Any]]]) -> list[list[tuple[int, dict[str, Any]]]]:
    """The requests sorted by output length and cut into LENGTH_BINS groups of (nearly) equal size."""
    ordered = sorted(requests, key=lambda r: r[0])
    n = len(ordered)
    bins = [ordered[i * n // LENGTH_BINS : (i + 1) * n // LENGTH_BINS] for i in range(LENGTH_BINS)]
    return [b for b in bins if b]


def acceptance_by_length(run: RunData) -> str | None:
    """Per task, each request's AL against its output length (a marker each; the line: the AL of each length
    tercile, a ratio of sums as the run's AL is), and per draft position the acceptance rate of each tercile, so a
    collapse on long outputs shows where the run's mean hides it. None without per-request counts."""
    tasks = {t: r for t, r in run.requests.items() if len(r) >= 2}
    if not tasks:
        return None
    fig = _figure(10.0, 3.2 * len(tasks))
    for row, (task, requests) in enumerate(tasks.items()):
        left = fig.add_subplot(len(tasks), 2, 2 * row + 1)
        lengths = [n for n, _ in requests]
        als = [1 + c["num_accepted_drafts"] / c["num_cycles"] for _, c in requests]
        left.scatter(lengths, als, s=16, alpha=0.6, color=RANK_COLOURS[0], label="one request")
        bins = _length_bins(requests)
        mids = [sum(n for n, _ in b) / len(b) for b in bins]
        bin_al = [1 + sum(c["num_accepted_drafts"] for _, c in b) / sum(c["num_cycles"] for _, c in b) for b in bins]
        left.plot(mids, bin_al, "-o", color=RANK_COLOURS[1], label="AL of each length tercile")
        left.set_xlabel("output tokens")
        left.set_ylabel("acceptance length")
        left.set_title(f"{run.label} {task}: AL per request by output length", fontsize=9)
        left.grid(alpha=0.3)
        left.legend(loc="best", fontsize=7)
        right = fig.add_subplot(len(tasks), 2, 2 * row + 2)
        k = max(len(c.get("accepted_per_position") or []) for _, c in requests)
        width = 0.8 / len(bins)
        for j, b in enumerate(bins):
            cycles = sum(c["num_cycles"] for _, c in b)
            rates = [
                sum(
                    (c.get("accepted_per_position") or [0] * k)[i]
                    if i < len(c.get("accepted_per_position") or [])
                    else 0
                    for _, c in b
                )
                / cycles
                for i in range(k)
            ]
            xs = [i + 1 + (j - (len(bins) - 1) / 2) * width for i in range(k)]
            right.bar(
                xs,
                rates,
                width=width,
                color=RANK_COLOURS[j + 2],
                label=f"outputs {b[0][0]}-{b[-1][0]} tokens ({len(b)} requests)",
            )
        right.set_xticks(list(range(1, k + 1)))
        right.set_xlabel("draft position")
        right.set_ylabel("acceptance rate")
        right.set_ylim(0, 1.12)
        right.set_title(f"{run.label} {task}: acceptance per position by output length", fontsize=9)
        right.grid(axis="y", alpha=0.3)
        right.legend(loc="upper right", fontsize=7)
    fig.tight_layout()
    return _png(fig)


def events(run: RunData) -> str | None:
    """Every timestamped event of a run over time, one row per type, coloured by rank; None without events."""
    timed = [e for e in run.events if isinstance(e, dict) and _is_num(e.get("ts"))]
    if not timed:
        return None
    types = sorted({str(e.get("type", "?")) for e in timed})
    fig = _figure(7.5, max(2.2, 0.45 * len(types) + 1.4))
    ax = fig.add_subplot(1, 1, 1)
    ax.set_title(f"{run.label} events over time")
    start = run.manifest.get("started")
    if not _is_num(start):
        start = min(e["ts"] for e in timed)
    y_of = {t: i for i, t in enumerate(types)}
    by_rank: dict[Any, tuple[list[float], list[int]]] = {}
    for e in timed:
        xs, ys = by_rank.setdefault(e.get("rank", "?"), ([], []))
        xs.append(float(e["ts"]) - start)
        ys.append(y_of[str(e.get("type", "?"))])
    for i, (rank, (xs, ys)) in enumerate(sorted(by_rank.items(), key=lambda kv: str(kv[0]))):
        ax.scatter(xs, ys, s=28, color=RANK_COLOURS[i % len(RANK_COLOURS)], label=f"rank {rank}", alpha=0.8)
    ax.set_yticks(list(range(len(types))))
    ax.set_yticklabels(types)
    ax.set_ylim(-0.6, len(types) - 0.4)
    ax.set_xlabel("seconds since run start")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    return _png(fig)
