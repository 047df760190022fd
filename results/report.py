"""A report over one or more finished runs: one self-contained HTML page and a Markdown summary.

The HTML page embeds every plot as a base64 PNG and loads nothing from anywhere (its Content-Security-Policy
forbids it, too), so it can be attached to a CI job or mailed as one file. The Markdown summary is compact enough
for a pull-request comment.

What is rendered: run metadata, per-task scores with 95% confidence intervals against reference and threshold,
acceptance per draft position, event counts and an event timeline. What is never rendered: sample text. No
prompt, target or output of any task appears in either document (GPQA must never be published; GSM8K outputs
are left out as well, so that no code path can leak a GPQA sample by mistake). Every string taken from a run is
HTML-escaped (or Markdown-escaped) before it is written.

Confidence interval of a score. A task's score is the mean of its filters' scores (strict-match and
flexible-extract for GSM8K), i.e. the mean over samples of x_i = (fraction of the scored filters that marked
sample i correct), a value in [0, 1]. For any variable in [0, 1] with mean p, Var(x) <= p(1 - p), the Bernoulli
variance; so the Wilson score interval computed at p = mean(x_i) and n = number of samples is a (slightly
conservative) 95% interval for the score, and exact Wilson whenever the filters agree on every sample. Unlike
the normal approximation, it does not collapse to a zero-width interval at a score of 0 or 100.
"""

from __future__ import annotations

import base64
import datetime as dt
import html
import io
import math
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from .store import Run

Z95 = 1.959963984540054
PASS, FAIL = "PASS", "FAIL"
VERDICT_COLOURS = {"PASS": "#1a7f37", "FAIL": "#cf222e", "NO-GATE": "#6e7781", "REPORT": "#0969da"}
RANK_COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]


# --------------------------------------------------------------------------------------------------- statistics


def wilson_interval(p: float, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a proportion p (0..1) observed over n trials; (0, 1) when n is 0."""
    if n <= 0:
        return 0.0, 1.0
    p = min(max(p, 0.0), 1.0)
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1.0 - p) / n + z * z / (4.0 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


# ---------------------------------------------------------------------------------------------- collected data


@dataclass
class TaskRow:
    run_index: int
    run_id: str
    task: str
    info: dict[str, Any]
    n: int  # samples behind the interval
    p: float | None  # the score as a fraction, from the samples (else from the summary)
    ci: tuple[float, float] | None  # 95% interval, in score units (0..100)


@dataclass
class RunData:
    index: int  # 1-based position in the report: "#1", "#2", ...
    run: Run
    manifest: dict[str, Any]
    summary: dict[str, Any]
    events: list[dict[str, Any]]
    tasks: list[TaskRow] = field(default_factory=list)

    @property
    def run_id(self) -> str:
        return str(self.summary.get("run_id") or self.manifest.get("run_id") or self.run.run_id)

    @property
    def label(self) -> str:
        return f"#{self.index}"

    @property
    def verdict(self) -> str:
        return str(self.summary.get("verdict", "?"))

    @property
    def engine(self) -> dict[str, Any]:
        return (self.manifest.get("config") or {}).get("engine") or {}


def _load(index: int, run: Run) -> RunData:
    if not run.is_finished:
        raise ValueError(f"run {run.run_id} is not finished (no summary.json)")
    data = RunData(index, run, run.manifest(), run.summary(), run.events())
    per_task = _sample_scores(run, data.summary.get("tasks") or {})
    for task, info in (data.summary.get("tasks") or {}).items():
        info = info if isinstance(info, dict) else {}
        n, p = per_task.get(task, (0, None))
        if n == 0 and isinstance(info.get("score"), (int, float)) and info.get("num_samples"):
            n, p = int(info["num_samples"]), float(info["score"]) / 100.0
        ci = None
        if n > 0 and p is not None:
            lo, hi = wilson_interval(p, n)
            ci = (100.0 * lo, 100.0 * hi)
        data.tasks.append(TaskRow(index, data.run_id, str(task), info, n, p, ci))
    return data


def _sample_scores(run: Run, tasks: dict[str, Any]) -> dict[str, tuple[int, float]]:
    """Per task: (samples, mean over samples of the fraction of scored filters that marked the sample correct).

    Only correctness flags are read; no sample text is kept.
    """
    sums: dict[str, list[float]] = {}
    for row in run.samples():
        task = row.get("task")
        info = tasks.get(task)
        if not isinstance(info, dict):
            continue
        filters = list((info.get("filter_scores") or {}).keys())
        if not filters:
            filters = [k[len("correct[") : -1] for k in row if k.startswith("correct[") and k.endswith("]")]
        flags = [row.get(f"correct[{f}]") for f in filters]
        flags = [bool(v) for v in flags if v is not None]
        if not flags:
            continue
        sums.setdefault(task, []).append(sum(flags) / len(flags))
    return {task: (len(xs), sum(xs) / len(xs)) for task, xs in sums.items()}


# ----------------------------------------------------------------------------------------------- formatting


def _num(v: Any, digits: int = 2) -> str:
    if isinstance(v, bool) or v is None:
        return "—" if v is None else str(v)
    if isinstance(v, (int, float)):
        return f"{v:.{digits}f}" if isinstance(v, float) else str(v)
    return str(v)


def _spec_text(spec: Any) -> str:
    if not isinstance(spec, dict) or not spec:
        return "none"
    alg = spec.get("algorithm", "?")
    k = spec.get("max_draft_len")
    return f"{alg} (K={k})" if k is not None else str(alg)


def _kv_text(kv: Any) -> str:
    if isinstance(kv, dict):
        return str(kv.get("version", "?"))
    return "—" if kv is None else str(kv)


def _device_text(manifest: dict[str, Any], engine: dict[str, Any]) -> str:
    devices = manifest.get("devices") or {}
    gpus = devices.get("gpus") if isinstance(devices, dict) else None
    parts = []
    if gpus:
        counts = Counter(str(g) for g in gpus)
        parts.append(", ".join(f"{c}× {name}" for name, c in counts.items()))
    else:
        dev = engine.get("device")
        cpu = devices.get("cpu") if isinstance(devices, dict) else None
        parts.append(" / ".join(str(x) for x in (dev, cpu) if x))
    host = devices.get("host") if isinstance(devices, dict) else None
    if host:
        parts.append(f"host {host}")
    return "; ".join(p for p in parts if p) or "—"


def _commit_text(manifest: dict[str, Any]) -> str:
    commit = manifest.get("commit")
    text = str(commit)[:12] if commit else "unknown"
    dirty = manifest.get("dirty")
    if dirty:
        text += " (dirty)"
    elif dirty is None:
        text += " (dirty: unknown)"
    return text


def _generic(value: Any) -> str:
    """A dict rendered generically as 'k: v, ...' (used for keys whose shape may grow, like 'lossless')."""
    if isinstance(value, dict):
        return ", ".join(f"{k}: {_generic(v)}" for k, v in value.items())
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _al(info: dict[str, Any]) -> float | None:
    acc = info.get("acceptance")
    if isinstance(acc, dict) and isinstance(acc.get("acceptance_length"), (int, float)):
        return float(acc["acceptance_length"])
    return None


def _overall(runs: list[RunData]) -> str:
    verdicts = [r.verdict for r in runs]
    if any(v == FAIL for v in verdicts):
        return FAIL
    if verdicts and all(v == PASS for v in verdicts):
        return PASS
    return "UNKNOWN"


def _utc(ts: Any) -> str:
    if not isinstance(ts, (int, float)):
        return "—"
    return dt.datetime.fromtimestamp(ts, tz=dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


# --------------------------------------------------------------------------------------------------- plotting


def _figure(width: float, height: float):
    """A figure on the Agg canvas, with no pyplot and so no global state (safe inside other programs)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    return fig


def _empty_plot(fig, ax, message: str) -> str:
    """A plot with nothing to show still renders, saying why."""
    ax.text(0.5, 0.5, message, ha="center", va="center", fontsize=13, color="#6e7781")
    ax.set_xticks([])
    ax.set_yticks([])
    return _png(fig)


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _img(b64: str, alt: str) -> str:
    return f'<img class="plot" alt="{html.escape(alt)}" src="data:image/png;base64,{b64}">'


def _plot_task_scores(task: str, rows: list[TaskRow], labels: dict[int, str]) -> str:
    fig = _figure(max(4.5, 1.1 * len(rows) + 2.5), 3.4)
    ax = fig.add_subplot(1, 1, 1)
    xs = list(range(len(rows)))
    refs = {r.info.get("reference") for r in rows}
    ths = {r.info.get("threshold") for r in rows}
    same_ref, same_th = len(refs) == 1, len(ths) == 1
    for x, r in zip(xs, rows, strict=True):
        ref, th = r.info.get("reference"), r.info.get("threshold")
        if isinstance(ref, (int, float)) and not same_ref:
            ax.hlines(ref, x - 0.35, x + 0.35, colors="#444444", linewidth=1.5)
        if isinstance(th, (int, float)) and not same_th:
            ax.hlines(th, x - 0.35, x + 0.35, colors="#cf222e", linestyles="dashed", linewidth=1.3)
    ref, th = next(iter(refs)), next(iter(ths))
    if same_ref and isinstance(ref, (int, float)):
        ax.axhline(ref, color="#444444", linewidth=1.5, label=f"reference {ref:.2f}")
    elif any(isinstance(v, (int, float)) for v in refs):
        ax.plot([], [], color="#444444", linewidth=1.5, label="reference (per run)")
    if same_th and isinstance(th, (int, float)):
        ax.axhline(th, color="#cf222e", linestyle="--", linewidth=1.3, label=f"threshold {th:.2f}")
    elif any(isinstance(v, (int, float)) for v in ths):
        ax.plot([], [], color="#cf222e", linestyle="--", linewidth=1.3, label="threshold (per run)")
    for x, r in zip(xs, rows, strict=True):
        score = r.info.get("score")
        if not isinstance(score, (int, float)):
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


def _plot_acceptance(run: RunData) -> str:
    fig = _figure(6.0, 3.0)
    ax = fig.add_subplot(1, 1, 1)
    series = []
    for r in run.tasks:
        acc = r.info.get("acceptance")
        if isinstance(acc, dict) and isinstance(acc.get("per_position_rate"), list) and acc["per_position_rate"]:
            rates = [float(v) if isinstance(v, (int, float)) else 0.0 for v in acc["per_position_rate"]]
            series.append((r.task, rates, _al(r.info)))
    ax.set_title(f"{run.label} acceptance per draft position")
    if not series:
        return _empty_plot(fig, ax, "no speculative decoding")
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


def _plot_events(run: RunData) -> str:
    events = [e for e in run.events if isinstance(e, dict)]
    types = sorted({str(e.get("type", "?")) for e in events})
    fig = _figure(7.5, max(2.2, 0.45 * len(types) + 1.4))
    ax = fig.add_subplot(1, 1, 1)
    ax.set_title(f"{run.label} events over time")
    if not events:
        return _empty_plot(fig, ax, "no events")
    stamps = [e["ts"] for e in events if isinstance(e.get("ts"), (int, float))]
    start = run.manifest.get("started")
    if not isinstance(start, (int, float)):
        start = min(stamps) if stamps else 0.0
    y_of = {t: i for i, t in enumerate(types)}
    by_rank: dict[Any, tuple[list[float], list[int]]] = {}
    for e in events:
        if not isinstance(e.get("ts"), (int, float)):
            continue
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


# ------------------------------------------------------------------------------------------------------- HTML

_CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 24px; color: #1f2328; }
h1 { margin-bottom: 4px; } h2 { border-bottom: 1px solid #d0d7de; padding-bottom: 4px; margin-top: 32px; }
table { border-collapse: collapse; margin: 8px 0 16px; font-size: 13px; }
th, td { border: 1px solid #d0d7de; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #f6f8fa; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.verdict { font-weight: 600; padding: 1px 6px; border-radius: 4px; color: #fff; }
.PASS { background: #1a7f37; } .FAIL { background: #cf222e; } .NO-GATE { background: #6e7781; }
.REPORT { background: #0969da; } .UNKNOWN { background: #9a6700; }
.plots { display: flex; flex-wrap: wrap; gap: 16px; } img.plot { max-width: 100%; border: 1px solid #d0d7de; }
.note { color: #59636e; font-size: 13px; max-width: 70em; } code { font-size: 12px; }
"""

_CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"


def _e(v: Any) -> str:
    return html.escape(str(v), quote=True)


def _badge(verdict: Any) -> str:
    v = str(verdict)
    cls = v if v in VERDICT_COLOURS or v == "UNKNOWN" else "UNKNOWN"
    return f'<span class="verdict {cls}">{_e(v)}</span>'


def _table(head: list[str], rows: list[list[str]], numeric: set[int] | None = None) -> str:
    """Cells are HTML already (escaped by the caller); header texts are escaped here."""
    numeric = numeric or set()
    out = ["<table><thead><tr>", *(f"<th>{_e(h)}</th>" for h in head), "</tr></thead><tbody>"]
    for row in rows:
        cells = "".join(f'<td class="num">{c}</td>' if i in numeric else f"<td>{c}</td>" for i, c in enumerate(row))
        out.append(f"<tr>{cells}</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _runs_table(runs: list[RunData]) -> str:
    rows = []
    for r in runs:
        rows.append(
            [
                _e(r.label),
                f"<code>{_e(r.run_id)}</code>",
                _badge(r.verdict),
                _e(_commit_text(r.manifest)),
                _e(r.engine.get("model", r.summary.get("model", "—"))),
                _e(_kv_text(r.engine.get("kv_cache", r.summary.get("kv_cache")))),
                _e(_spec_text(r.engine.get("spec"))),
                _e(r.manifest.get("world_size", r.summary.get("world_size", "—"))),
                _e(_device_text(r.manifest, r.engine)),
                _e(_utc(r.manifest.get("started"))),
                _e(_num(r.summary.get("elapsed_s", r.manifest.get("elapsed_s")), 1)),
            ]
        )
    head = ["#", "run id", "verdict", "commit", "model", "KV cache", "spec", "world size", "device", "started"]
    return _table([*head, "elapsed (s)"], rows, numeric={7, 10})


def _scores_table(runs: list[RunData]) -> str:
    has_lossless = any("lossless" in t.info for r in runs for t in r.tasks)
    head = ["#", "task", "samples", "score", "95% CI", "filters", "reference", "threshold", "theta", "verdict"]
    head += ["failed requests", "AL"] + (["lossless"] if has_lossless else [])
    rows = []
    for r in runs:
        for t in r.tasks:
            info = t.info
            filters = info.get("filter_scores") or {}
            ftext = "<br>".join(f"{_e(k)}: {_e(_num(v))}" for k, v in filters.items()) if filters else "—"
            ci = f"{t.ci[0]:.1f} – {t.ci[1]:.1f}" if t.ci else "—"
            row = [
                _e(r.label),
                _e(t.task),
                _e(_num(info.get("num_samples", t.n))),
                _e(_num(info.get("score"))),
                _e(ci),
                ftext,
                _e(_num(info.get("reference"))),
                _e(_num(info.get("threshold"))),
                _e(_num(info.get("theta"), 3)),
                _badge(info.get("verdict", "?")),
                _e(_num(info.get("num_failed_requests"))),
                _e(_num(_al(info))),
            ]
            if has_lossless:
                row.append(_e(_generic(info["lossless"])) if "lossless" in info else "—")
            rows.append(row)
    return _table(head, rows, numeric={2, 3, 6, 7, 8, 10, 11})


def _acceptance_table(runs: list[RunData]) -> str:
    head = ["#", "task", "AL", "acceptance rate", "cycles", "draft tokens", "accepted drafts", "K", "per position"]
    rows = []
    for r in runs:
        for t in r.tasks:
            acc = t.info.get("acceptance")
            if not isinstance(acc, dict):
                continue
            per_pos = acc.get("per_position_rate") or []
            rows.append(
                [
                    _e(r.label),
                    _e(t.task),
                    _e(_num(acc.get("acceptance_length"))),
                    _e(_num(acc.get("acceptance_rate"), 3)),
                    _e(_num(acc.get("num_cycles"))),
                    _e(_num(acc.get("num_draft_tokens"))),
                    _e(_num(acc.get("num_accepted_drafts"))),
                    _e(_num(acc.get("max_draft_len"))),
                    _e(", ".join(_num(v, 3) for v in per_pos) if isinstance(per_pos, list) else per_pos),
                ]
            )
    if not rows:
        return '<p class="note">No run used speculative decoding.</p>'
    return _table(head, rows, numeric={2, 3, 4, 5, 6, 7})


def _events_table(runs: list[RunData]) -> str:
    counts = [r.summary.get("events") or dict(Counter(str(e.get("type", "?")) for e in r.events)) for r in runs]
    types = sorted({str(t) for c in counts for t in c})
    if not types:
        return '<p class="note">No events in any run.</p>'
    rows = [[_e(t), *(_e(c.get(t, 0)) for c in counts)] for t in types]
    rows.append(["<b>failing events</b>", *(_e(r.summary.get("failing_events", "—")) for r in runs)])
    return _table(["event", *(r.label for r in runs)], rows, numeric=set(range(1, len(runs) + 1)))


def _html(runs: list[RunData]) -> str:
    overall = _overall(runs)
    labels = {r.index: r.label for r in runs}
    tasks: dict[str, list[TaskRow]] = {}
    for r in runs:
        for t in r.tasks:
            tasks.setdefault(t.task, []).append(t)
    score_plots = [_img(_plot_task_scores(task, rows, labels), f"{task} scores") for task, rows in tasks.items()]
    acc_plots = [_img(_plot_acceptance(r), f"{r.label} acceptance") for r in runs]
    event_plots = [_img(_plot_events(r), f"{r.label} events") for r in runs]
    generated = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>specdec-eval report: {_e(overall)}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>specdec-eval report {_badge(overall)}</h1>",
        f'<p class="note">{len(runs)} run(s); generated {_e(generated)}.</p>',
        "<h2>Runs</h2>",
        _runs_table(runs),
        "<h2>Scores</h2>",
        _scores_table(runs),
        f'<div class="plots">{"".join(score_plots)}</div>' if score_plots else '<p class="note">No tasks.</p>',
        '<p class="note">Markers: a run\'s score, coloured by its verdict; solid line: reference; dashed line: '
        "threshold. Error bars: 95% Wilson score interval of the score, computed from the per-sample correctness "
        "x<sub>i</sub> = fraction of the scored filters (e.g. strict-match and flexible-extract) that marked "
        "sample i correct, so that mean(x<sub>i</sub>) is the score. Because every x<sub>i</sub> lies in [0, 1], "
        "its variance is at most p(1&minus;p): the Bernoulli interval is conservative for the mean of the "
        "filters, and exact when the filters agree on every sample.</p>",
        "<h2>Acceptance</h2>",
        _acceptance_table(runs),
        f'<div class="plots">{"".join(acc_plots)}</div>',
        "<h2>Events</h2>",
        _events_table(runs),
        f'<div class="plots">{"".join(event_plots)}</div>',
        '<p class="note">One marker per event; x: seconds since the run started; colour: the rank that recorded '
        "it.</p>",
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"


# --------------------------------------------------------------------------------------------------- Markdown


def _md(v: Any) -> str:
    """A table cell: no newlines, pipes escaped, and no raw HTML (GitHub renders inline HTML in comments)."""
    text = str(v).replace("\r", " ").replace("\n", " ")
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    for ch in "\\|`*[]":
        text = text.replace(ch, "\\" + ch)
    return text


def _markdown(runs: list[RunData]) -> str:
    overall = _overall(runs)
    failed = sum(r.verdict == FAIL for r in runs)
    lines = [f"### specdec-eval report: **{overall}**", ""]
    lines.append(
        f"**Overall: {overall}** ({len(runs)} run(s)" + (f", {failed} failed)" if failed else ")"),
    )
    lines.append("")
    for r in runs:
        model = r.engine.get("model", r.summary.get("model", "—"))
        kv = _kv_text(r.engine.get("kv_cache", r.summary.get("kv_cache")))
        world = r.manifest.get("world_size", r.summary.get("world_size", "—"))
        lines.append(
            f"- {_md(r.label)} {_md(r.run_id)} **{_md(r.verdict)}**: model {_md(model)}, "
            f"KV {_md(kv)}, spec {_md(_spec_text(r.engine.get('spec')))}, world size {_md(world)}, "
            f"commit {_md(_commit_text(r.manifest))}"
        )
    lines.append("")
    has_lossless = any("lossless" in t.info for r in runs for t in r.tasks)
    head = ["run", "task", "score", "reference", "threshold", "verdict", "AL"] + (["lossless"] if has_lossless else [])
    lines.append("| " + " | ".join(head) + " |")
    lines.append(
        "|" + "|".join(["---", "---", "---:", "---:", "---:", "---", "---:"] + (["---"] if has_lossless else [])) + "|"
    )
    for r in runs:
        for t in r.tasks:
            info = t.info
            cells = [
                r.label,
                t.task,
                _num(info.get("score")),
                _num(info.get("reference")),
                _num(info.get("threshold")),
                info.get("verdict", "?"),
                _num(_al(info)),
            ]
            if has_lossless:
                cells.append(_generic(info["lossless"]) if "lossless" in info else "—")
            lines.append("| " + " | ".join(_md(c) for c in cells) + " |")
    lines.append("")
    for r in runs:
        counts = r.summary.get("events") or dict(Counter(str(e.get("type", "?")) for e in r.events))
        text = ", ".join(f"{_md(k)} {_md(v)}" for k, v in sorted(counts.items())) if counts else "none"
        failing = r.summary.get("failing_events")
        tail = f" (failing: {_md(failing)})" if failing else ""
        lines.append(f"Events {_md(r.label)}: {text}{tail}  ")
    return "\n".join(lines).rstrip() + "\n"


# ---------------------------------------------------------------------------------------------------- entry


def build_report(runs: list[Run]) -> tuple[str, str]:
    """(HTML page, Markdown summary) of finished runs, in the order given. ValueError for an unfinished run."""
    if not runs:
        raise ValueError("no runs to report")
    data = [_load(i, run) for i, run in enumerate(runs, start=1)]
    return _html(data), _markdown(data)
