"""A report over one or more finished runs: one self-contained HTML page and a Markdown summary.

The HTML page embeds every plot as a base64 PNG and loads nothing from anywhere (its Content-Security-Policy
forbids it, too), so it can be attached to a CI job or mailed as one file. The Markdown summary is compact enough
for a pull-request comment.

What is rendered: run metadata; each gate's verdict in words per task and run, and which gate decided each run
(`gates`); per-task scores with 95% confidence intervals against reference and threshold (`data`); acceptance
per draft position; event counts and an event timeline (`plots`, left out when there is nothing to plot). What
is never rendered: sample text. No prompt, target or output of any task appears in either document (GPQA must
never be published; GSM8K outputs are left out as well, so that no code path can leak a GPQA sample by mistake).
Every string taken from a run is HTML-escaped (`html_page`) or Markdown-escaped (`markdown`) before it is
written.

Modules: `data` (loading, the score interval), `text` (values as text), `gates` (gate wording, the deciding
gate), `plots`, `html_page`, `markdown`.
"""

from __future__ import annotations

from ..store import Run
from .data import load_run, wilson_interval
from .html_page import render_html
from .markdown import render_markdown

__all__ = ["build_report", "wilson_interval"]


def build_report(runs: list[Run]) -> tuple[str, str]:
    """(HTML page, Markdown summary) of finished runs, in the order given. ValueError for an unfinished run."""
    if not runs:
        raise ValueError("no runs to report")
    data = [load_run(i, run) for i, run in enumerate(runs, start=1)]
    return render_html(data), render_markdown(data)
