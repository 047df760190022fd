"""The lossless gate's margins in the report: per task, the margin at each first divergence
of the spec-dec run against its baseline beside those of the noise-floor control against the same baseline, with the
noise bound the verdict used, as a plot; and the divergent samples by position and margin, as a table (numbers and
token ids only)."""

from __future__ import annotations

from typing import Any

from ...gates.lossless import GATE as LOSSLESS
from .data import RunData, TaskRow
from .plots import _figure, _png

SPEC_COLOUR, CONTROL_COLOUR, BOUND_COLOUR = "#cf222e", "#0969da", "#444444"


def margin_rows(row: TaskRow) -> list[dict[str, Any]]:
    """The task's divergences that carry a margin: doc id, position, margin, lower bound?, class."""
    ls = row.info.get(LOSSLESS.key) or {}
    out = []
    for d in ls.get("divergences") or []:
        m = d.get("margins") or {}
        if m.get("judged") is not None:
            out.append(
                {
                    "doc_id": d["doc_id"],
                    "position": d["position"],
                    "margin": m["judged"],
                    "lower_bound": bool(m.get("lower_bound")),
                    "class": m.get("class", ""),
                }
            )
    return sorted(out, key=lambda x: -x["margin"])


def margin_plot(row: TaskRow, label: str) -> str | None:
    """Margins at the first divergence (nats, log scale), spec-dec vs baseline and control vs baseline, with the
    noise bound; None when neither side has one."""
    ls = row.info.get(LOSSLESS.key) or {}
    noise = ls.get("noise") or {}
    spec = [r["margin"] for r in margin_rows(row)]
    control = [m["margin"] for m in noise.get("margins") or [] if m.get("margin") is not None]
    if not spec and not control:
        return None
    floor = 1e-4  # an exact tie (margin 0) still gets a marker
    fig = _figure(6.0, 2.6)
    ax = fig.add_subplot(1, 1, 1)
    for y, values, colour, name in (
        (1, spec, SPEC_COLOUR, "spec-dec vs baseline"),
        (0, control, CONTROL_COLOUR, "control vs baseline"),
    ):
        jitter = [y + 0.25 * ((i * 0.618) % 1 - 0.5) for i in range(len(values))]
        shown = [max(v, floor) for v in values]
        ax.scatter(shown, jitter, s=22, color=colour, alpha=0.8, label=f"{name} ({len(values)})")
    if noise.get("bound") is not None:
        ax.axvline(
            max(noise["bound"], floor),
            color=BOUND_COLOUR,
            linestyle="--",
            linewidth=1.2,
            label=f"noise bound {noise['bound']:.4f}",
        )
    ax.set_xscale("log")
    ax.set_yticks([0, 1], ["control", "spec-dec"])
    ax.set_ylim(-0.6, 1.6)
    ax.set_xlabel("margin at the first divergent token (nats)")
    ax.set_title(f"{label} {row.task}: lossless margins", fontsize=10)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return _png(fig)


def margins_section(runs: list[RunData], escape, table, plots) -> str:
    """HTML: per run and task with margins, the plot and the table of divergent samples."""
    parts = []
    for r in runs:
        for t in r.tasks:
            rows = margin_rows(t)
            image = margin_plot(t, r.label)
            if image is None:
                continue
            ls = t.info.get(LOSSLESS.key) or {}
            parts.append(f"<h3>{escape(r.label)} {escape(t.task)}: {escape(ls.get('verdict'))}</h3>")
            parts.append(f'<p class="note">{escape(ls.get("reason"))}</p>')
            parts.append(plots([(image, f"{r.label} {t.task} margins")]))
            if rows:
                body = [
                    [
                        escape(x["doc_id"]),
                        escape(x["position"]),
                        escape(f"{'>= ' if x['lower_bound'] else ''}{x['margin']:.4f}"),
                        escape(x["class"]),
                    ]
                    for x in rows
                ]
                parts.append(table(["doc", "first divergent token", "margin (nats)", "class"], body, {0, 1, 2}))
    return "\n".join(parts)
