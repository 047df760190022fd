"""The report as one self-contained HTML page: plots embedded as data: URLs, a Content-Security-Policy that
forbids loading anything, and every string taken from a run HTML-escaped."""

from __future__ import annotations

import html
import time
from collections.abc import Mapping
from typing import Any

from ...gates import declarations
from . import plots
from .data import RunData, TaskRow
from .gates import GateText, banner, gate_texts, overall, stopped_text
from .margins import margins_section
from .pit import pit_section
from .plots import VERDICT_COLOURS
from .text import acceptance_length, basis_text, commit_text, device_text, kv_text, num, spec_text, utc

_CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 24px; color: #1f2328; }
h1 { margin-bottom: 4px; } h2 { border-bottom: 1px solid #d0d7de; padding-bottom: 4px; margin-top: 32px; }
table { border-collapse: collapse; margin: 8px 0 16px; font-size: 13px; }
th, td { border: 1px solid #d0d7de; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #f6f8fa; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.verdict { font-weight: 600; padding: 1px 6px; border-radius: 4px; color: #fff; }
.PASS { background: #1a7f37; } .FAIL { background: #cf222e; } .NO-GATE { background: #6e7781; }
.REPORT { background: #0969da; } .UNKNOWN { background: #9a6700; }
.banner { font-size: 15px; margin: 4px 0 12px; max-width: 80em; }
.plots { display: flex; flex-wrap: wrap; gap: 16px; } img.plot { max-width: 100%; border: 1px solid #d0d7de; }
.note { color: #59636e; font-size: 13px; max-width: 70em; } code { font-size: 12px; }
"""

_CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"
_SCORE_NOTE = (
    '<p class="note">Markers: a run\'s score, coloured by its verdict; solid line: reference; dashed line: '
    "threshold. Error bars: 95% Wilson score interval of the score, computed from the per-sample correctness "
    "x<sub>i</sub> = fraction of the scored filters (e.g. strict-match and flexible-extract) that marked "
    "sample i correct, so that mean(x<sub>i</sub>) is the score. Because every x<sub>i</sub> lies in [0, 1], "
    "its variance is at most p(1&minus;p): the Bernoulli interval is conservative for the mean of the "
    "filters, and exact when the filters agree on every sample.</p>"
)


def _or(value: Any, default: Any) -> Any:
    return default if value is None else value


def _e(v: Any) -> str:
    return html.escape(str(v), quote=True)


def _badge(verdict: Any) -> str:
    v = str(verdict)
    cls = v if v in VERDICT_COLOURS or v == "UNKNOWN" else "UNKNOWN"
    return f'<span class="verdict {cls}">{_e(v)}</span>'


def _gate_cell(gate: GateText | None) -> str:
    if gate is None:
        return "—"
    words = gate.text.removeprefix(gate.verdict).lstrip(":, ")
    return f"{_badge(gate.verdict)} {_e(words)}"


def _img(b64: str, alt: str) -> str:
    return f'<img class="plot" alt="{html.escape(alt)}" src="data:image/png;base64,{b64}">'


def _plots(images: list[tuple[str | None, str]]) -> str:
    shown = [_img(b64, alt) for b64, alt in images if b64 is not None]
    return f'<div class="plots">{"".join(shown)}</div>' if shown else ""


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
                _e(commit_text(r.manifest)),
                _e(r.engine.get("model", _or(r.summary.model, "—"))),
                _e(kv_text(r.engine.get("kv_cache", r.summary.kv_cache))),
                _e(spec_text(r.engine)),
                _e(r.manifest.get("world_size", _or(r.summary.world_size, "—"))),
                _e(device_text(r.manifest, r.engine)),
                _e(utc(r.manifest.get("started"))),
                _e(num(_or(r.summary.elapsed_s, r.manifest.get("elapsed_s")), 1)),
            ]
        )
    head = ["#", "run id", "verdict", "commit", "model", "KV cache", "spec", "world size", "device", "started"]
    return _table([*head, "elapsed (s)"], rows, numeric={7, 10})


def _scores_table(runs: list[RunData]) -> str:
    head = ["#", "task", "samples", "score", "95% CI", "filters", "reference", "threshold", "theta", "verdict"]
    head += ["failed requests", "AL"]
    rows = []
    for r in runs:
        for t in r.tasks:
            info = t.summary
            filters = info.filter_scores or {}
            ftext = "<br>".join(f"{_e(k)}: {_e(num(v))}" for k, v in filters.items()) if filters else "—"
            ci = f"{t.ci[0]:.1f} – {t.ci[1]:.1f}" if t.ci else "—"
            rows.append(
                [
                    _e(r.label),
                    _e(t.task),
                    _e(num(_or(info.num_samples, t.n))),
                    _e(num(info.score)),
                    _e(ci),
                    ftext,
                    _e(num(info.reference)),
                    _e(num(info.threshold)),
                    _e(num(info.theta, 3)),
                    _badge(info.verdict or "?"),
                    _e(num(info.num_failed_requests)),
                    _e(num(acceptance_length(info))),
                ]
            )
    return _table(head, rows, numeric={2, 3, 6, 7, 8, 10, 11})


def _gates_table(runs: list[RunData]) -> str:
    """Per run and task, each gate's verdict in words; columns for gates no task had are left out."""
    rows: list[tuple[RunData, TaskRow, dict[str, Any]]] = []
    for r in runs:
        for t in r.tasks:
            rows.append((r, t, {**gate_texts(t.summary), _STOPPED: stopped_text(t.summary)}))
    # the accuracy test's column always (every task has one), the others where some task has them
    always = [g.name for g in declarations() if g.key is None]
    named = [*(g.name for g in declarations()), _STOPPED]
    columns = [c for c in named if c in always or any(x[2][c] for x in rows)]
    out = []
    for r, t, cells in rows:
        line = [_e(r.label), _e(t.task)]
        for c in columns:
            value = cells[c]
            line.append(_e(value) if isinstance(value, str) else _gate_cell(value) if value else "—")
        out.append(line)
    return _table(["#", "task", *(f"{c} gate" if c != _STOPPED else "early stop" for c in columns)], out)


_STOPPED = "stopped"  # the early-stop column beside the gates' (no gate: a gate of that name would read as one)


def _acceptance_table(runs: list[RunData]) -> str:
    head = [
        "#",
        "task",
        "AL",
        "acceptance rate",
        "cycles",
        "draft tokens",
        "accepted drafts",
        "K",
        "per position",
        "basis",
    ]
    rows = []
    for r in runs:
        for t in r.tasks:
            acc = t.summary.acceptance
            if not isinstance(acc, Mapping):
                continue
            per_pos = acc.get("per_position_rate") or []
            rows.append(
                [
                    _e(r.label),
                    _e(t.task),
                    _e(num(acc.get("acceptance_length"))),
                    _e(num(acc.get("acceptance_rate"), 3)),
                    _e(num(acc.get("num_cycles"))),
                    _e(num(acc.get("num_draft_tokens"))),
                    _e(num(acc.get("num_accepted_drafts"))),
                    _e(num(acc.get("max_draft_len"))),
                    _e(", ".join(num(v, 3) for v in per_pos) if isinstance(per_pos, list) else per_pos),
                    _e(basis_text(acc)),
                ]
            )
        reported = r.summary.reported_acceptance
        if isinstance(reported, Mapping) and str(reported.get("basis")).startswith(
            "server-wide"
        ):  # no task figure: the fallback's
            rows.append(
                [
                    _e(r.label),
                    "(server)",
                    _e(num(reported.get("acceptance_length"))),
                    _e(num(reported.get("acceptance_rate"), 3)),
                    _e(num(reported.get("num_cycles"))),
                    _e(num(reported.get("num_draft_tokens"))),
                    _e(num(reported.get("num_accepted_drafts"))),
                    _e(num(reported.get("max_draft_len"))),
                    "—",
                    _e(basis_text(reported)),
                ]
            )
    if not rows:
        return '<p class="note">No run used speculative decoding.</p>'
    return _table(head, rows, numeric={2, 3, 4, 5, 6, 7})


def _events_table(runs: list[RunData]) -> str:
    counts = [r.event_counts() for r in runs]
    types = sorted({str(t) for c in counts for t in c})
    if not types:
        return '<p class="note">No events in any run.</p>'
    rows = [[_e(t), *(_e(c.get(t, 0)) for c in counts)] for t in types]
    rows.append(["<b>failing events</b>", *(_e(r.summary.failing_events) for r in runs)])
    return _table(["event", *(r.label for r in runs)], rows, numeric=set(range(1, len(runs) + 1)))


def render_html(runs: list[RunData]) -> str:
    verdict = overall(runs)
    labels = {r.index: r.label for r in runs}
    tasks: dict[str, list[TaskRow]] = {}
    for r in runs:
        for t in r.tasks:
            tasks.setdefault(t.task, []).append(t)
    score_plots = _plots([(plots.task_scores(task, rows, labels), f"{task} scores") for task, rows in tasks.items()])
    acc_plots = _plots(
        [(plots.acceptance(r), f"{r.label} acceptance") for r in runs]
        + [(plots.acceptance_by_length(r), f"{r.label} acceptance by output length") for r in runs]
    )
    event_plots = _plots([(plots.events(r), f"{r.label} events") for r in runs])
    generated = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>specdec-eval report: {_e(verdict)}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>specdec-eval report {_badge(verdict)}</h1>",
        f'<p class="banner">{_e(banner(runs))}</p>',
        f'<p class="note">{len(runs)} run(s); generated {_e(generated)}.</p>',
        "<h2>Runs</h2>",
        _runs_table(runs),
        "<h2>Gates</h2>",
        _gates_table(runs),
        "<h2>Scores</h2>",
        _scores_table(runs),
        score_plots + _SCORE_NOTE if score_plots else '<p class="note">No task has a score to plot.</p>',
        *(["<h2>Lossless margins</h2>", margins] if (margins := margins_section(runs, _e, _table, _plots)) else []),
        *(["<h2>Lossless in distribution (sampled)</h2>", pit] if (pit := pit_section(runs, _e, _plots)) else []),
        "<h2>Acceptance</h2>",
        _acceptance_table(runs),
        acc_plots,
        "<h2>Events</h2>",
        _events_table(runs),
        event_plots,
        '<p class="note">One marker per event; x: seconds since the run started; colour: the rank that recorded it.</p>'
        if event_plots
        else "",
        "</body></html>",
    ]
    return "\n".join(p for p in parts if p) + "\n"
