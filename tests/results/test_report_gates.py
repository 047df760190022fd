"""The report says which gate decided, in words: accuracy against its threshold, lossless against its baseline,
acceptance length against its band, early stops; the banner names the deciding gate; empty plots are left out."""

from __future__ import annotations

import re

import pytest
from specdec_eval.evals.gates.acceptance import acceptance_band
from specdec_eval.results.report import build_report
from specdec_eval.results.report.data import load_run
from specdec_eval.results.report.gates import acceptance_gate, accuracy_gate, banner, decide_run, lossless_gate
from specdec_eval.results.shown_verdict import UNDERPOWERED

from .test_report import HOSTILE, _samples, _task, _write_run

BASE = "20300101-000000-aaaaaaaaaaaa"


def _lossless(identical: int, n: int, divergences: list[tuple[int, int]] | None = None) -> dict:
    verdict = "PASS" if identical == n else "FAIL"
    reason = "every output identical to the baseline" if verdict == "PASS" else f"{n - identical} differ"
    return {
        "verdict": verdict,
        "identical": identical,
        "divergent": n - identical,
        "num_pairs": n,
        "divergences": [{"doc_id": d, "position": p} for d, p in divergences or []],
        "baseline_run": BASE,
        "reason": reason,
    }


def _acceptance_gate(verdict: str, al: float, ref: float | None = 2.14, slack: float = 0.0, **extra) -> dict:
    """A gate result as evals/gates/acceptance.py writes it, its band from the gate's own function."""
    min_al = None if ref is None else 0.95 * ref
    band = None if ref is None else acceptance_band(ref, min_al, 0.05, slack)
    return {
        "verdict": verdict,
        "acceptance_length": al,
        "ref_al": ref,
        "min_al": min_al,
        "rtol": 0.05,
        "slack": slack,
        "band": band,
        "reason": extra.pop("reason", ""),
        "per_position": extra.pop("per_position", []),
        "test_id": "accuracy/test_specdec.py::TestSmolLM2_135M::test_eagle3[v2_kv_cache-one_model-tp1]",
        **extra,
    }


def _run(tmp_path, name: str, tasks: dict, events: list | None = None, spec: bool = True):
    spec_cfg = {"algorithm": "eagle3", "max_draft_len": 3} if spec else None
    samples = [s for t in tasks for s in _samples(t, 10, 5, gpqa=t.startswith("gpqa"))]
    return _write_run(tmp_path, name, "smollm2", spec_cfg, tasks, events or [], samples)


def test_accuracy_in_words():
    assert accuracy_gate(_task(75.0, 76.0, 72.5, "PASS", 40)).text == "PASS: 75.00 ≥ threshold 72.50 (reference 76.00)"
    assert accuracy_gate(_task(60.0, 76.0, 72.5, "FAIL", 40)).text == "FAIL: 60.00 < threshold 72.50 (reference 76.00)"
    no_gate = accuracy_gate(_task(30.0, 33.0, 20.0, "NO-GATE", 40)).text
    assert no_gate == (
        "NO-GATE: threshold 20.00 is at or below the floor, so accuracy cannot fail at n = 40 "
        "(score 30.00) (reference 33.00)"
    )
    assert accuracy_gate(_task(41.2, None, None, "REPORT", 8)).text == "REPORT: no reference, score 41.20 only"
    failed = accuracy_gate(_task(0.0, 76.0, 72.5, "FAIL", 8, num_failed_requests=8))
    assert failed.text == "FAIL: 8 of 8 requests failed (a failed request is never scored as an answer)"


def test_lossless_in_words():
    assert lossless_gate({}) is None
    assert lossless_gate({"lossless": _lossless(10, 10)}).text == f"PASS, 10/10 identical to baseline {BASE}"
    text = lossless_gate({"lossless": _lossless(3, 10, [(d, d + 1) for d in range(7)])}).text
    assert text == (
        f"FAIL, 3/10 identical to baseline {BASE}; first divergent: doc 0 @ token 1, doc 1 @ token 2, "
        "doc 2 @ token 3, doc 3 @ token 4, doc 4 @ token 5 (+2 more)"
    )
    none = {"lossless": {"verdict": "NO-BASELINE", "reason": "no finished baseline run under runs"}}
    assert lossless_gate(none).text == "NO-BASELINE: no finished baseline run under runs"


def test_acceptance_in_words():
    assert acceptance_gate({}) is None
    ok = acceptance_gate({"acceptance_gate": _acceptance_gate("PASS", 2.14)})
    assert ok.text == "PASS: AL 2.140 within [2.033, 2.247] (ref 2.140 ± 5%, min 2.033)"
    positions = [
        {"position": 1, "rate": 0.8, "ref": 0.78, "verdict": "PASS"},
        {"position": 2, "rate": 0.031, "ref": 0.52, "verdict": "FAIL"},
    ]
    bad = acceptance_gate(
        {
            "acceptance_gate": _acceptance_gate(
                "FAIL", 1.02, reason="below min_al 2.03 (collapse)", per_position=positions
            )
        }
    )
    assert bad.verdict == "FAIL"
    assert bad.text == (
        "FAIL: AL 1.020 outside [2.033, 2.247] (ref 2.140 ± 5%, min 2.033); position 2 rate 0.031 "
        "< ref 0.520 — below min_al 2.03 (collapse)"
    )
    unref = acceptance_gate({"acceptance_gate": _acceptance_gate("NO-REFERENCE", 2.3, ref=None, reason="no entry")})
    assert unref.text == "NO-REFERENCE: AL 2.300, no reference band — no entry"


def test_a_pass_within_a_band_wider_than_min_al_is_never_bare(tmp_path):
    """Issue 39's ten documents: the gate's own record (evals/gates/acceptance.py) says its band's floor lies below
    min_al; the report's gate text and the banner say it, and state the gate's power."""
    from specdec_eval.evals.gates.acceptance import acceptance_gate as gate

    stats = {"num_cycles": 200, "num_accepted_drafts": 202, "accepted_per_position": [], "num_requests": 10}
    wide = gate("t", stats, {"t": {"ref_al": 1.999, "min_al": 1.899}}, slack=0.282)
    text = acceptance_gate({"acceptance_gate": wide})
    assert text.verdict == "PASS" and text.text.startswith(f"PASS ({UNDERPOWERED}): AL 2.010 within [1.717, 2.281]")
    assert "power: at 10 documents it detects a drop of" in text.text
    tasks = {"gsm8k": _task(30.0, 33.0, 20.0, "NO-GATE", 10, lossless=_lossless(10, 10), acceptance_gate=wide)}
    run = load_run(1, _run(tmp_path, "20300101-010000-ffffffffffff", tasks))
    assert decide_run(run).sentence == (
        "PASS (decided by the lossless gate and the acceptance gate; acceptance "
        f"{UNDERPOWERED}; accuracy cannot fail at this n)"
    )
    narrow = gate("t", {**stats, "num_requests": 1319}, {"t": {"ref_al": 1.999, "min_al": 1.899}}, slack=0.03)
    assert UNDERPOWERED not in acceptance_gate({"acceptance_gate": narrow}).text


def test_banner_names_the_deciding_gate(tmp_path):
    no_gate = {
        "gsm8k": _task(30.0, 33.0, 20.0, "NO-GATE", 10, lossless=_lossless(10, 10)),
        "gpqa_diamond": _task(25.0, 30.0, 24.0, "NO-GATE", 10, lossless=_lossless(10, 10)),
    }
    run = load_run(1, _run(tmp_path, "20300101-010000-bbbbbbbbbbbb", no_gate))
    assert decide_run(run).sentence == "PASS (decided by the lossless gate; accuracy cannot fail at this n)"
    mixed = {
        "gsm8k": _task(75.0, 76.0, 72.5, "PASS", 10, lossless=_lossless(10, 10)),
        "gpqa_diamond": _task(
            25.0, 30.0, 24.0, "NO-GATE", 10, lossless=_lossless(10, 10), acceptance_gate=_acceptance_gate("PASS", 2.14)
        ),
    }
    run = load_run(2, _run(tmp_path, "20300101-020000-cccccccccccc", mixed))
    assert decide_run(run).sentence == (
        "PASS (decided by the accuracy gate on gsm8k, the lossless gate and the "
        "acceptance gate on gpqa_diamond; accuracy cannot fail at this n on "
        "gpqa_diamond)"
    )
    # the task's verdict carries the acceptance gate's FAIL; the accuracy gate itself passed
    collapsed = {
        "gsm8k": _task(
            75.0,
            76.0,
            72.5,
            "FAIL",
            10,
            lossless=_lossless(10, 10),
            acceptance_gate=_acceptance_gate("FAIL", 1.02, reason="below min_al"),
        )
    }
    run = load_run(3, _run(tmp_path, "20300101-030000-dddddddddddd", collapsed))
    assert decide_run(run).decided_by == [
        "the acceptance gate on gsm8k: AL 1.020 outside [2.033, 2.247] (ref 2.140 ± 5%, min 2.033) — below min_al"
    ]
    report_only = load_run(
        4, _run(tmp_path, "20300101-040000-eeeeeeeeeeee", {"gsm8k": _task(41.0, None, None, "REPORT", 10)}, spec=False)
    )
    # a run no gate could fail is NO-GATE, never PASS
    assert decide_run(report_only).sentence == "NO-GATE (no gate could fail; no accuracy reference)"
    assert banner([run]) == decide_run(run).sentence
    assert banner([report_only, run]).startswith("#4 NO-GATE (no gate could fail; no accuracy reference); #3 FAIL (")


def test_report_renders_acceptance_gates_early_stops_and_leaves_empty_plots_out(tmp_path):
    stopped = {"n": 120, "of": 1319, "reason": f"accuracy boundary crossed {HOSTILE}"}
    acceptance = {"acceptance_length": 2.14, "per_position_rate": [0.7, 0.4, 0.2], "max_draft_len": 3}
    tasks = {
        "gsm8k": _task(
            30.0,
            33.0,
            20.0,
            "NO-GATE",
            10,
            acceptance,
            stopped=stopped,
            lossless=_lossless(10, 10),
            acceptance_gate=_acceptance_gate("PASS", 2.14, reason=HOSTILE),
        )
    }
    spec = _run(tmp_path, "20300101-010000-bbbbbbbbbbbb", tasks)
    plain = _run(tmp_path, BASE, {"gsm8k": _task(None, None, None, "REPORT", 10)}, spec=False)
    html, md = build_report([plain, spec])
    assert "<script" not in html.lower() and "<script" not in md
    banner_html = (
        '<p class="banner">#1 NO-GATE (no gate could fail; no accuracy reference); #2 PASS (decided by '
        "the lossless gate and the acceptance gate; accuracy cannot fail at this n; stopped early)</p>"
    )
    assert banner_html in html
    assert "<th>acceptance gate</th><th>early stop</th>" in html
    assert "PASS</span> AL 2.140 within [2.033, 2.247] (ref 2.140 ± 5%, min 2.033)" in html
    assert f"PASS</span> 10/10 identical to baseline {BASE}" in html
    assert "stopped early at 120 of 1319 samples: accuracy boundary crossed &lt;script&gt;" in html
    gates = [line for line in md.splitlines() if line.startswith("- #2 gsm8k: ")]
    assert gates and "acceptance PASS: AL 2.140 within \\[2.033, 2.247\\]" in gates[0]
    assert "stopped early at 120 of 1319 samples" in gates[0]
    # run #1 has no score, no acceptance and no events: no plot of it at all; run #2 has no events either
    alts = re.findall(r'<img class="plot" alt="([^"]+)"', html)
    assert alts == ["gsm8k scores", "#2 acceptance"]
    assert "No events in any run." in html and "seconds since the run started" not in html


@pytest.mark.parametrize("score", [None])
def test_no_score_at_all_draws_no_score_plot(tmp_path, score):
    run = _run(tmp_path, BASE, {"gsm8k": _task(score, None, None, "REPORT", 10)}, spec=False)
    html, _ = build_report([run])
    assert "data:image/png" not in html and "No task has a score to plot." in html


def test_lossless_names_its_baseline_kind_and_an_audit_failure_in_words():
    twin = {**_lossless(10, 10), "baseline_label": "paired twin, audited on 3 of 3 planned documents"}
    assert lossless_gate({"lossless": twin}).text == (
        f"PASS, 10/10 identical to paired twin, audited on 3 of 3 planned documents {BASE}"
    )
    why = "the spec-dec engine changes the target's own outputs: the paired twin of gsm8k doc 4 differs ..."
    audit = {"num_audited": 1, "planned": 3, "first_divergence": {"task": "gsm8k", "doc_id": 4}}
    caught = {**twin, "verdict": "FAIL", "reason": why, "audit": audit}
    text = lossless_gate({"lossless": caught}).text
    assert text == f"FAIL: {why}" and "10/10 identical" not in text  # the twins' agreement means nothing then
    # bf16: the audit's plain engine flipped near-ties only; the twins stand, and the report says how they were judged
    near = "3 of 8 audited twins differ from a plain engine, all at near-ties (largest margin 0.0156 within ...)"
    judged = {**twin, "reason": "every output identical to the baseline", "audit": audit, "audit_margins": near}
    text = lossless_gate({"lossless": judged}).text
    assert text.startswith("PASS, 10/10 identical to paired twin") and text.endswith(f"twin audit: {near}")


def test_the_spec_method_is_named_for_local_and_endpoint_runs():
    """A local engine records {algorithm, max_draft_len}; an endpoint its declared method's name (a llama.cpp run
    declared `--spec ngram` once read "spec none" in the report)."""
    from specdec_eval.results.report.text import spec_text

    assert spec_text({"spec": {"algorithm": "eagle3", "max_draft_len": 3}}) == "eagle3 (K=3)"
    assert spec_text({"spec": "ngram", "max_draft_len": 3}) == "ngram (K=3)"
    assert spec_text({"spec": None, "max_draft_len": 0}) == "none" and spec_text({}) == "none"
