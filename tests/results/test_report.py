"""`specdec-eval report`: the self-contained HTML page and the Markdown summary.

Synthetic runs (written with the store's own helpers) carry the rich content: references, a failing gate,
acceptance, events on two ranks, a 'lossless' entry, a hostile model name and sample text that must never be
rendered. One real run of the tiny preset (spec-dec with an injected fault) proves the path end to end, and a
headless Chromium screenshot proves the page actually renders.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import typer
from specdec_eval.cli.report import report
from specdec_eval.results.report import build_report, wilson_interval
from specdec_eval.results.sample_record import SampleRecord
from specdec_eval.results.store import Run, open_run

from specdec_eval.errors import UserError

HOSTILE = "<script>alert('pwned')</script>&"
SECRETS = ("SECRET-GSM8K-OUTPUT", "SECRET-GSM8K-TARGET", "SECRET-GPQA-TARGET", "SECRET-PROMPT")
STARTED = 1_800_000_000.0


def _task(score, reference, threshold, verdict, n, acceptance=None, **extra):
    return {
        "num_samples": n,
        "score": score,
        "filter_scores": {"strict-match": score, "flexible-extract": score},
        "reference": reference,
        "threshold": threshold,
        "theta": 0.35 if reference is not None else None,
        "verdict": verdict,
        "num_failed_requests": 0,
        "acceptance": acceptance,
        "data": "synthetic",
        "report": "synthetic",
        **extra,
    }


def _samples(task: str, n: int, correct: int, gpqa: bool) -> list[dict]:
    rows = []
    for i in range(n):
        ok = i < correct
        rows.append(
            {
                "task": task,
                "doc_id": i,
                "doc_hash": f"d{i}",
                "prompt_hash": f"p{i}",
                "target": "SECRET-GPQA-TARGET" if gpqa else f"SECRET-GSM8K-TARGET {i}",
                "output": None if gpqa else f"SECRET-GSM8K-OUTPUT {i} SECRET-PROMPT",
                "output_hash": f"h{i}",
                "num_output_tokens": 8,
                "output_token_ids": [1, 2, 3],
                "finish_reason": "stop",
                "error": None,
                "acceptance_length": 2.5 if not gpqa else None,
                "extracted[strict-match]": "7" if ok else "[invalid]",
                "correct[strict-match]": ok,
                "extracted[flexible-extract]": "7" if ok else "[invalid]",
                "correct[flexible-extract]": ok,
            }
        )
    return rows


def _write_run(root: Path, run_id: str, model: str, spec: dict | None, tasks: dict, events: list, samples: list):
    run = Run(root / run_id)
    run.path.mkdir(parents=True)
    engine = {"model": model, "dtype": "bfloat16", "device": "cuda", "tp_size": 2, "kv_cache": {"version": "v2"}}
    run.write_manifest(
        {
            "run_id": run_id,
            "config_key": run_id[-12:],
            "test_id": "accuracy/test_specdec.py::Test::test[x]",
            "config": {"engine": {**engine, "spec": spec}, "eval": {"tasks": list(tasks), "limit": None}},
            "commit": "0123456789abcdef0123",
            "dirty": True,
            "versions": {"python": "3.11"},
            "devices": {"host": "node-1", "cpu": "x86_64", "gpus": ["NVIDIA H200", "NVIDIA H200"]},
            "world_size": 2,
            "command": ["specdec-eval", "run"],
            "started": STARTED,
            "finished": STARTED + 120,
            "elapsed_s": 120.0,
        }
    )
    verdict = "FAIL" if any(t["verdict"] == "FAIL" for t in tasks.values()) else "PASS"
    counts: dict[str, int] = {}
    for e in events:
        counts[e["type"]] = counts.get(e["type"], 0) + 1
    run.write_summary(
        {
            "verdict": verdict,
            "tasks": tasks,
            "events": counts,
            "failing_events": sum(e["type"] == "request_failed" for e in events),
            "elapsed_s": 120.0,
            "model": model,
            "kv_cache": "v2",
            "spec": spec["algorithm"] if spec else None,
            "world_size": 2,
            "run_id": run_id,
            "run_dir": str(run.path),
            "test_id": "accuracy/test_specdec.py::Test::test[x]",
        }
    )
    run.write_events(events)
    run.write_samples([SampleRecord.from_row(s) for s in samples])
    return run


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory) -> tuple[Path, list[Run]]:
    root = tmp_path_factory.mktemp("report_runs")
    base = _write_run(
        root,
        "20300101-000000-aaaaaaaaaaaa",
        "smollm2",
        None,
        {
            "gsm8k": _task(75.0, 76.0, 72.5, "PASS", 40),
            "gpqa_diamond": _task(30.0, 33.0, 25.0, "PASS", 20),
        },
        [],
        _samples("gsm8k", 40, 30, gpqa=False) + _samples("gpqa_diamond", 20, 6, gpqa=True),
    )
    acceptance = {
        "acceptance_length": 2.5,
        "acceptance_rate": 0.5,
        "per_position_rate": [0.8, 0.5, 0.2],
        "num_cycles": 100,
        "num_draft_tokens": 300,
        "num_accepted_drafts": 150,
        "accepted_per_position": [80, 50, 20],
        "max_draft_len": 3,
    }
    lossless = {"identical": 38, "divergent": 2, "verdict": "FAIL"}
    events = [
        {"ts": STARTED + 5.0, "rank": 0, "type": "fault_injected", "point": "draft_step"},
        {"ts": STARTED + 5.1, "rank": 0, "type": "forward_error", "error": HOSTILE},
        {"ts": STARTED + 5.2, "rank": 1, "type": "forward_error", "error": "x"},
        *({"ts": STARTED + 5.3 + i, "rank": i % 2, "type": "request_retried", "request_id": i} for i in range(6)),
        {"ts": STARTED + 30.0, "rank": 1, "type": "request_failed", "request_id": 3},
        {"ts": STARTED + 31.0, "rank": 0, "type": HOSTILE},
    ]
    spec = _write_run(
        root,
        "20300101-010000-bbbbbbbbbbbb",
        HOSTILE,
        {"algorithm": "eagle3", "max_draft_len": 3},
        {
            "gsm8k": _task(60.0, 76.0, 72.5, "FAIL", 40, acceptance, lossless=lossless),
            "gpqa_diamond": _task(35.0, 33.0, 25.0, "PASS", 20, {**acceptance, "acceptance_length": 2.1}),
        },
        events,
        _samples("gsm8k", 40, 24, gpqa=False) + _samples("gpqa_diamond", 20, 7, gpqa=True),
    )
    return root, [base, spec]


@pytest.fixture(scope="module")
def built(synthetic) -> tuple[str, str]:
    return build_report(synthetic[1])


def test_wilson_interval():
    lo, hi = wilson_interval(0.5, 100)
    assert lo == pytest.approx(0.4038, abs=1e-4) and hi == pytest.approx(0.5962, abs=1e-4)
    lo, hi = wilson_interval(0.0, 10)  # no zero-width interval at the edges, unlike the normal approximation
    assert lo == 0.0 and hi == pytest.approx(0.2775, abs=1e-4)
    assert wilson_interval(1.0, 10) == pytest.approx((0.7225, 1.0), abs=1e-4)
    assert wilson_interval(0.3, 0) == (0.0, 1.0)


def test_html_is_self_contained(built):
    html, _ = built
    images = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)
    # 2 task score plots + 1 acceptance plot and 1 event timeline (of the spec-dec run: the baseline has neither
    # acceptance nor events, and plots with nothing to show are left out)
    assert len(images) == 4
    alts = re.findall(r'<img class="plot" alt="([^"]+)"', html)
    assert alts == ["gpqa_diamond scores", "gsm8k scores", "#2 acceptance", "#2 events"]  # summary keys sorted
    assert all(base64.b64decode(b)[:8] == b"\x89PNG\r\n\x1a\n" for b in images)
    # Nothing is fetched: every src/href is a data: URL, and no URL at all appears in the page.
    for attr in re.findall(r'\b(?:src|href)\s*=\s*["\']?([^"\'\s>]*)', html, flags=re.IGNORECASE):
        assert attr.startswith("data:"), attr
    assert "http://" not in html and "https://" not in html
    assert "<link" not in html.lower() and "@import" not in html and "url(" not in html
    assert "Content-Security-Policy" in html


def test_html_escapes_run_data(built):
    html, _ = built
    assert "<script" not in html.lower()
    assert "&lt;script&gt;alert(&#x27;pwned&#x27;)&lt;/script&gt;&amp;" in html  # model name, event type


def test_html_tables(built):
    html, _ = built
    for text in (
        "20300101-000000-aaaaaaaaaaaa",
        "20300101-010000-bbbbbbbbbbbb",
        "0123456789ab (dirty)",
        "2× NVIDIA H200",
        "eagle3 (K=3)",
        "FAIL</span> 38/40 identical to the baseline",  # the 'lossless' entry, in words
        "FAIL</span> 60.00 &lt; threshold 72.50 (reference 76.00)",  # the accuracy gate, in words
        "PASS</span> 75.00 ≥ threshold 72.50 (reference 76.00)",
        "0.800, 0.500, 0.200",
        "request_retried",
    ):
        assert text in html, text
    lo, hi = wilson_interval(0.75, 40)  # the interval comes from the 40 samples' correctness
    assert f"{100 * lo:.1f} – {100 * hi:.1f}" in html
    assert '<span class="verdict FAIL">FAIL</span></h1>' in html  # overall: one run failed


def test_no_sample_text(built):
    html, md = built
    for secret in SECRETS:
        assert secret not in html and secret not in md


def test_markdown(built):
    _, md = built
    lines = md.splitlines()
    assert lines[0] == "### specdec-eval report: **FAIL**"
    assert "**Overall: FAIL** (2 run(s), 1 failed)" in lines
    assert "| run | task | score | reference | threshold | verdict | AL | lossless |" in lines
    for row in (
        "| #1 | gsm8k | 75.00 | 76.00 | 72.50 | PASS | — | — |",
        "| #1 | gpqa_diamond | 30.00 | 33.00 | 25.00 | PASS | — | — |",
        "| #2 | gsm8k | 60.00 | 76.00 | 72.50 | FAIL | 2.50 | FAIL, 38/40 identical to the baseline |",
        "| #2 | gpqa_diamond | 35.00 | 33.00 | 25.00 | PASS | 2.10 | — |",
    ):
        assert row in lines, row
    assert "Events #1: none  " in lines
    events = next(line for line in lines if line.startswith("Events #2:"))
    assert "forward_error 2" in events and "request_retried 6" in events and "(failing: 1)" in events
    assert "<script" not in md and "&lt;script&gt;" in md  # raw HTML would render in a GitHub comment


def test_unfinished_run_is_refused(tmp_path):
    run = Run(tmp_path / "20300101-000000-cccccccccccc")
    run.write_manifest({"run_id": run.run_id})
    with pytest.raises(ValueError, match="not finished"):
        build_report([run])
    with pytest.raises(UserError, match="not finished"):
        _report_cli([run.run_id, "--root", str(tmp_path), "-o", str(tmp_path / "r.html")])


def _report_cli(argv: list[str]) -> None:
    """The command as registered in the app when it is, else on an app of its own."""
    from specdec_eval.cli import main as cli_main

    if any(c.name == "report" for c in cli_main.app.registered_commands):
        app, argv = cli_main.app, ["report", *argv]
    else:
        app = typer.Typer(add_completion=False)
        app.command()(report)
    app(args=argv, standalone_mode=False)


def test_cli_writes_html_and_markdown(synthetic, tmp_path, capsys):
    root, runs = synthetic
    out, md = tmp_path / "sub" / "report.html", tmp_path / "comment.md"
    # by id prefix under --root, and by folder
    _report_cli(["20300101-000000", str(runs[1].path), "--root", str(root), "--out", str(out), "--markdown", str(md)])
    stdout = capsys.readouterr().out
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert md.read_text(encoding="utf-8") == stdout
    assert "| #2 | gsm8k | 60.00 | 76.00 | 72.50 | FAIL |" in stdout


def test_cli_unknown_run(synthetic, tmp_path):
    root, _ = synthetic
    with pytest.raises(UserError, match="no run 'nope'"):
        _report_cli(["nope", "--root", str(root), "-o", str(tmp_path / "r.html")])
    with pytest.raises(UserError, match="matches 2 runs"):
        _report_cli(["2030", "--root", str(root), "-o", str(tmp_path / "r.html")])
    assert not (tmp_path / "r.html").exists()


def test_real_run_end_to_end(tmp_path, capsys):
    """A real spec-dec run of the tiny preset with an injected fault (so it has acceptance and events)."""
    from specdec_eval.cli.main import main

    root = tmp_path / "runs"
    argv = ["run", "--model", "tiny", "--device-memory", "256MiB", "--tasks", "gsm8k_smoke,gpqa_diamond_smoke"]
    argv += ["--limit", "2", "--max-output-len", "8", "--spec", "eagle3", "--draft-len", "3"]
    argv += ["--inject", "draft_step:1@2", "--out", str(root), "--fresh"]
    try:
        main(argv)
    except SystemExit as e:
        assert not e.code, e.code
    capsys.readouterr()
    # A spec-dec run may also have produced its non-speculative baseline run: report every run there is.
    run_dirs = sorted(p for p in root.iterdir() if (p / "summary.json").is_file())
    spec_runs = [p for p in run_dirs if open_run(p).manifest()["config"]["engine"].get("spec")]
    assert len(spec_runs) == 1, run_dirs
    out = tmp_path / "report.html"
    _report_cli([*(p.name for p in run_dirs), "--root", str(root), "--out", str(out)])
    md = capsys.readouterr().out
    html = out.read_text(encoding="utf-8")
    # one score plot per task, per spec-dec run an acceptance plot and its AL by output length (per-request
    # counts), and an event timeline per run with events
    with_events = [p for p in run_dirs if open_run(p).events()]
    assert spec_runs[0] in with_events  # the injected fault is an event
    assert len(re.findall(r'src="data:image/png;base64,', html)) == 2 + 2 * len(spec_runs) + len(with_events)
    assert "forward_error" in html and "eagle3 (K=3)" in html and spec_runs[0].name in html
    assert "| #1 | gsm8k_smoke |" in md and "| #1 | gpqa_diamond_smoke |" in md
    assert "forward_error 1" in md
    # GPQA text never leaves the run: no target of a GPQA smoke sample appears in the report
    targets = {s.target for p in run_dirs for s in open_run(p).samples() if s.task.startswith("gpqa")}
    assert targets and not any(f">{t}<" in html or f"| {t} |" in md for t in targets)


# ------------------------------------------------------------------------------------------- screenshot

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def _chromium() -> str:
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    reason = f"no Chromium ({', '.join(CHROMIUM_NAMES)}) on PATH; scripts/setup.sh installs it as root"
    if os.environ.get("CI", "").lower() in ("true", "1", "yes"):
        pytest.fail(reason + " (CI must run the screenshot check)")
    pytest.skip(reason)


def test_screenshot_is_not_blank(built, tmp_path):
    """Headless Chromium renders the page; the screenshot must show content: a dominant (background) colour
    covering less than 98% of the pixels, many distinct colours, and the FAIL badge's red."""
    import numpy as np
    from matplotlib.image import imread

    chromium = _chromium()
    page, shot = tmp_path / "report.html", tmp_path / "shot.png"
    page.write_text(built[0], encoding="utf-8")
    cmd = [chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run"]
    cmd += [f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}", "--window-size=1200,2000"]
    proc = subprocess.run([*cmd, page.as_uri()], capture_output=True, text=True, timeout=120)
    assert shot.is_file(), f"no screenshot (exit {proc.returncode}): {proc.stderr[-2000:]}"

    pixels = (imread(shot)[..., :3] * 255).round().astype(np.uint8)
    assert pixels.shape[:2] == (2000, 1200)
    colours, counts = np.unique(pixels.reshape(-1, 3), axis=0, return_counts=True)
    dominant = counts.max() / counts.sum()
    assert dominant < 0.98, f"{dominant:.1%} of the screenshot is one colour"
    assert len(colours) >= 50, f"only {len(colours)} distinct colours"
    red = np.array([0xCF, 0x22, 0x2E])
    assert (np.abs(pixels.astype(int) - red).max(axis=-1) <= 12).sum() > 100, "no FAIL badge rendered"
