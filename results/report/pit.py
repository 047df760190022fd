"""The sampled lossless gate's PIT histogram in the report (the gate records the counts in its numbers): bars of
the randomized PIT of every sampled position, flat under the null, with the expected count and its band, titled
with the gate's basis. Reads the gate's record only (results imports nothing from evals)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ...gates.lossless import GATE as LOSSLESS
from .plots import VERDICT_COLOURS, _figure, _png

EXPECTED_COLOUR = "#444444"


def pit_histogram(record: Mapping[str, Any] | None, label: str) -> str | None:
    """A base64 PNG of the record's `pit_histogram` counts, or None when the record has none. The dashed line is the
    count each bin expects under the null, the grey band +-2 binomial standard deviations around it."""
    counts = list((record or {}).get("pit_histogram") or [])
    total = sum(counts)
    if not counts or not total:
        return None
    bins = len(counts)
    expected = total / bins
    spread = 2 * math.sqrt(total * (1 / bins) * (1 - 1 / bins))
    verdict = str(record.get("verdict", ""))
    fig = _figure(6.0, 2.6)
    ax = fig.add_subplot(1, 1, 1)
    lefts = [i / bins for i in range(bins)]
    ax.bar(
        lefts,
        counts,
        width=1 / bins,
        align="edge",
        color=VERDICT_COLOURS.get(verdict, "#0969da"),
        alpha=0.8,
        edgecolor="white",
    )
    ax.axhspan(max(expected - spread, 0), expected + spread, color=EXPECTED_COLOUR, alpha=0.12)
    ax.axhline(expected, color=EXPECTED_COLOUR, linestyle="--", linewidth=1.2, label=f"expected {expected:.0f}")
    pit = record.get("pit") or {}
    p = pit.get("p")
    shown = f", PIT p = {p:.2g}" if isinstance(p, int | float) else ""
    basis = record.get("basis", "")
    ax.set_xlim(0, 1)
    ax.set_xlabel("randomized PIT u (0: the likeliest tokens)")
    ax.set_ylabel("positions")
    ax.set_title(f"{label}: sampled lossless {verdict} ({total:,} positions, {basis}{shown})", fontsize=9)
    ax.legend(fontsize=7, loc="upper right")
    return _png(fig)


def pit_section(runs, escape, plots) -> str:
    """HTML: per run and sampled task judged in distribution, its PIT histogram under the verdict and its basis."""
    parts = []
    for r in runs:
        for t in r.tasks:
            record = t.info.get(LOSSLESS.key) or {}
            image = pit_histogram(record, r.label)
            if image is None:
                continue
            parts.append(f"<h3>{escape(r.label)} {escape(t.task)}: {escape(record.get('verdict'))}</h3>")
            parts.append(f'<p class="note">{escape(record.get("reason"))}</p>')
            parts.append(plots([(image, f"{r.label} {t.task} PIT histogram")]))
    return "\n".join(parts)
