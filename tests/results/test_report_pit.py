"""The report's PIT histogram of the sampled lossless gate (results/report/pit.py), drawn from the gate's record."""

from __future__ import annotations

import base64

from specdec_eval.results.report.pit import pit_histogram

RECORD = {
    "verdict": "PASS",
    "basis": "exact",
    "positions": 200,
    "pit": {"p": 0.43},
    "pit_histogram": [10, 12, 9, 11, 8, 10, 10, 9, 11, 10, 10, 9, 12, 10, 9, 11, 10, 9, 10, 10],
}


def test_the_histogram_is_drawn_from_the_record():
    png = pit_histogram(RECORD, "run 1 gsm8k_sampled")
    assert base64.b64decode(png).startswith(b"\x89PNG")


def test_no_counts_no_plot():
    assert pit_histogram(None, "x") is None
    assert pit_histogram({"verdict": "NO-GATE"}, "x") is None
    assert pit_histogram({"pit_histogram": [0, 0]}, "x") is None


def test_the_html_section_shows_each_sampled_verdict_with_its_histogram_and_skips_the_others():
    from types import SimpleNamespace

    from specdec_eval.results.report.pit import pit_section

    sampled = SimpleNamespace(task="gsm8k_sampled", info={"lossless": {**RECORD, "reason": "sampled: 200 positions"}})
    greedy = SimpleNamespace(task="gsm8k", info={"lossless": {"verdict": "PASS", "reason": "identical"}})
    runs = [SimpleNamespace(label="run 1", tasks=[greedy, sampled])]
    html = pit_section(runs, str, lambda images: "".join(f"<img alt='{alt}'>" for _, alt in images))
    assert "run 1 gsm8k_sampled: PASS" in html and "sampled: 200 positions" in html
    assert "gsm8k_sampled PIT histogram" in html and "identical" not in html
    assert pit_section([SimpleNamespace(label="run 1", tasks=[greedy])], str, lambda images: "") == ""
