"""The sweep's page: the grid as a table with every cell's verdict and a heatmap of the acceptance change, strings
escaped, and rendered by headless Chromium into a page that shows them (as the run report's test does)."""

from __future__ import annotations

import subprocess

import pytest
from specdec_eval.results.report.sweep_page import render_sweep_html

from .test_report import _chromium


def _cell(batch: str, kv: str, verdict: str, change: float | None, reasons: list[str]) -> dict:
    return {
        "cell": f"batch={batch} kv-cache={kv}",
        "labels": {"batch": batch, "kv-cache": kv},
        "verdict": verdict,
        "status": "finished",
        "run_verdict": "PASS",
        "gates": {"gsm8k": {"accuracy": "PASS", "lossless": "PASS"}},
        "acceptance_length": 2.0 * (1 + (change or 0.0)),
        "acceptance_change": change,
        "acceptance_p": None if change is None else 0.004,
        "outputs_identical": None if verdict == "BASE" else 8,
        "outputs_compared": None if verdict == "BASE" else 8,
        "reasons": reasons,
    }


@pytest.fixture(scope="module")
def page() -> str:
    cells = [
        _cell("1", "v1", "BASE", None, []),
        _cell("1", "v2<b>", "PASS", 0.0, []),
        _cell("2", "$\\foo$", "PASS", 0.0, []),  # a label matplotlib would read as mathtext
        _cell("4", "v1", "FAIL", -0.31, ["acceptance fell 31.0% against the base (p = 0.004)"]),
        _cell("4", "v2<b>", "FAIL", -0.29, ["acceptance fell 29.0% against the base (p = 0.004)"]),
    ]
    return render_sweep_html({"axes": ["batch", "kv-cache"], "cells": cells})


def test_the_page_has_the_grid_the_heatmap_and_escapes(page):
    assert page.count('class="verdict FAIL"') >= 3 and "2 FAIL of 5 cells" in page
    assert "acceptance fell 31.0% against the base (p = 0.004)" in page and "-31.0%" in page
    assert 'src="data:image/png;base64,' in page  # the heatmap, embedded
    assert "v2<b>" not in page and "v2&lt;b&gt;" in page
    assert "$\\foo$" in page  # plain text in the table; the heatmap drew it as text (mathtext would raise)


@pytest.mark.slow
def test_screenshot_shows_the_grid(page, tmp_path):
    import numpy as np
    from matplotlib.image import imread

    chromium = _chromium()
    path, shot = tmp_path / "sweep.html", tmp_path / "shot.png"
    path.write_text(page, encoding="utf-8")
    cmd = [chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run"]
    cmd += [f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}", "--window-size=1200,1400"]
    proc = subprocess.run([*cmd, path.as_uri()], capture_output=True, text=True, timeout=120)
    assert shot.is_file(), f"no screenshot (exit {proc.returncode}): {proc.stderr[-2000:]}"
    pixels = (imread(shot)[..., :3] * 255).round().astype(np.uint8)
    colours, counts = np.unique(pixels.reshape(-1, 3), axis=0, return_counts=True)
    assert counts.max() / counts.sum() < 0.98 and len(colours) >= 50
    red = np.array([0xCF, 0x22, 0x2E])
    assert (np.abs(pixels.astype(int) - red).max(axis=-1) <= 12).sum() > 100, "no FAIL badge rendered"
