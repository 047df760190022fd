"""The report's lossless margins (results/report/margins.py): both distributions plotted with the noise bound, and
the divergent samples listed by position and margin, largest first."""

from __future__ import annotations

import html

from specdec_eval.results.report.data import RunData, TaskRow
from specdec_eval.results.report.margins import margin_plot, margin_rows, margins_section
from specdec_eval.results.run_summary import RunSummary, TaskSummary

LOSSLESS = {
    "verdict": "FAIL",
    "reason": "1 of 2 divergences are beyond the noise bound",
    "divergences": [
        {"doc_id": 4, "position": 7, "margins": {"judged": 0.0156, "lower_bound": False, "class": "near-tie"}},
        {"doc_id": 9, "position": 2, "margins": {"judged": 3.25, "lower_bound": True, "class": "beyond-noise"}},
        {"doc_id": 11, "position": 0},  # no logprobs: left out of the margins
    ],
    "noise": {"bound": 0.0625, "margins": [{"doc_id": 1, "position": 3, "margin": 0.0078, "lower_bound": False}]},
}


def _row(info):
    return TaskRow(1, "r1", "gsm8k", TaskSummary.from_json(info), 32, None, None)


def test_rows_largest_first_and_the_plot_drawn():
    rows = margin_rows(_row({"lossless": LOSSLESS}))
    assert [(r["doc_id"], r["position"], r["class"]) for r in rows] == [(9, 2, "beyond-noise"), (4, 7, "near-tie")]
    assert margin_plot(_row({"lossless": LOSSLESS}), "#1")  # a base64 PNG
    assert margin_plot(_row({"lossless": {"verdict": "PASS", "divergences": []}}), "#1") is None


def test_section_lists_divergences_with_lower_bounds_marked():
    run = RunData(
        1, None, {}, RunSummary.from_json({"verdict": "FAIL", "tasks": {}}), [], [_row({"lossless": LOSSLESS})]
    )
    page = margins_section(
        [run],
        lambda v: html.escape(str(v)),
        lambda head, rows, numeric: repr(rows),
        lambda images: "".join(alt for _, alt in images),
    )
    assert "&gt;= 3.2500" in page and "0.0156" in page and "gsm8k margins" in page
