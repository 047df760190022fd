"""The acceptance gate states its power: from the run's own sampling error (the ratio estimator, requests as
clusters), the smallest drop it detects, what a drop to min_al gets, how many documents would do better; and a PASS
within a band whose floor lies below min_al says so. The statement is checked against simulated runs."""

from __future__ import annotations

import random

import pytest
from scipy import optimize, stats
from specdec_eval.evals.gates.acceptance import acceptance_gate
from specdec_eval.evals.gates.acceptance_gate import acceptance_slack
from specdec_eval.evals.gates.acceptance_power import SLACK_Z, band_floor, gate_power


@pytest.fixture(autouse=True)
def _collect_engines():
    """Overrides conftest's per-test gc.collect: no engines are built here."""
    yield


REF = {"t": {"ref_al": 1.999, "min_al": 1.89909, "max_draft_len": 3}}


def _stats(al: float, n: int) -> dict:
    cycles = 20 * n
    return {
        "num_cycles": cycles,
        "num_accepted_drafts": round((al - 1) * cycles),
        "accepted_per_position": [],
        "max_draft_len": 3,
        "num_requests": n,
    }


def test_the_issues_ten_documents_pass_within_a_band_wider_than_min_al():
    """Issue 39's run: AL 2.010 on ten documents against ref_al 1.999, sampling slack 0.282: the band's floor 1.717
    lies below min_al 1.899, so the PASS says it cannot rule out a drop to min_al, and states what it can see."""
    gate = acceptance_gate("t", _stats(2.010, 10), REF, slack=0.282)
    assert gate["verdict"] == "PASS"
    power = gate["power"]
    assert power["band_wider_than_min_al"] and power["num_documents"] == 10
    se = 0.282 / SLACK_Z
    assert power["std_error"] == pytest.approx(se, abs=1e-6)
    # the rule is a t test with SE estimated from ten documents: noncentral t with 9 degrees of freedom
    assert power["mde"] == pytest.approx(_t_mde(se, 1.999, 9), abs=1e-4)  # ~16.0 %
    assert power["alpha"] == pytest.approx(stats.t.cdf(-SLACK_Z, 9), abs=1e-6)  # 0.015, not the normal's 0.005
    assert 0.06 < power["p_detect_min_al"] < 0.11
    assert power["documents_for_band_at_min_al"] == 80  # 10 x (0.282 / (1.999 - 1.899))^2 = 79.6
    assert power["documents_for_min_al_drop"] is None and power["limit_p_detect_min_al"] == 0.5
    assert "lies below min_al 1.899" in gate["reason"] and "does not rule out" in gate["reason"]
    assert "at 10 documents it detects a drop of 16.0%" in gate["reason"]
    assert "beyond this gate (the band reaches min_al from 80 documents on" in gate["reason"]


def _t_mde(se: float, ref: float, df: int) -> float:
    """The drop d with P(noncentral t(df, -d ref / (se (1 - d))) < -2.576) = 0.8 (the spread shrinks with the AL),
    solved here independently."""
    return optimize.brentq(lambda d: stats.nct.cdf(-SLACK_Z, df, -d / (1 - d) * ref / se) - 0.8, 1e-6, 0.4)


def test_a_large_run_has_a_band_at_min_al_and_still_says_what_it_sees():
    gate = acceptance_gate("t", _stats(1.98, 1319), REF, slack=0.03)
    power = gate["power"]
    assert gate["verdict"] == "PASS" and not power["band_wider_than_min_al"]
    assert band_floor(1.999, 1.89909, 0.05, 0.03) == pytest.approx(1.89905, abs=1e-4)
    assert "does not rule out" not in gate["reason"] and "power: at 1319 documents" in gate["reason"]
    assert 0.45 < power["p_detect_min_al"] < 0.51  # the band's edge: a coin flip


def test_no_sampling_error_no_power_and_a_fail_keeps_its_reason():
    gate = acceptance_gate("t", _stats(2.0, 1), REF)
    assert gate["verdict"] == "PASS" and gate["power"] == {"statement": gate["power"]["statement"]}
    assert "not stated" in gate["reason"]
    failed = acceptance_gate("t", _stats(1.5, 10), REF, slack=0.282)
    assert failed["verdict"] == "FAIL" and "power" not in failed["reason"] and failed["power"]["mde"] > 0


def test_a_min_al_below_the_rtol_band_can_be_reached():
    """A hand-set min_al 10 % below ref_al: rtol's 5 % band sits above it, so enough documents detect a drop to
    min_al with power 0.8, and the count is where the power crosses it."""
    p = gate_power(2.0, 1.8, 0.05, slack=0.3, num_documents=10)
    assert p.documents_for_min_al_drop is not None
    more = gate_power(
        2.0, 1.8, 0.05, slack=0.3 * (10 / p.documents_for_min_al_drop) ** 0.5, num_documents=p.documents_for_min_al_drop
    )
    fewer = gate_power(
        2.0,
        1.8,
        0.05,
        slack=0.3 * (10 / (p.documents_for_min_al_drop - 1)) ** 0.5,
        num_documents=p.documents_for_min_al_drop - 1,
    )
    assert more.p_detect_min_al >= 0.8 > fewer.p_detect_min_al


def _documents(rng: random.Random, n: int) -> list[tuple[int, int]]:
    """(cycles, accepted drafts) of n GSM8K-like documents: 20-80 cycles, acceptance per slot varying by document."""
    out = []
    for _ in range(n):
        cycles = rng.randint(20, 80)
        p = min(0.95, max(0.02, rng.gauss(0.33, 0.12)))
        out.append((cycles, sum(rng.random() < p for _ in range(3 * cycles))))
    return out


@pytest.mark.parametrize("n", [10, 50])
def test_the_stated_power_holds_on_simulated_runs(n):
    """Runs of n documents from one population whose true AL is ref_al, and the statement its SE gives: an
    unchanged drafter FAILs below the band as often as the stated alpha (4000 runs: at ten documents the t model's
    0.015 and the normal's 0.005 are told apart), and with every document's AL lowered by the stated smallest
    detectable drop (outputs kept: cycles grow as acceptance falls) about 1 - beta = 0.8 of 1000 runs FAIL."""
    rng = random.Random(n)
    population = _documents(rng, 20000)
    ref = 1 + sum(a for _, a in population) / sum(c for c, _ in population)
    refs = {"t": {"ref_al": ref, "min_al": 0.95 * ref}}
    stated = gate_power(ref, 0.95 * ref, 0.05, acceptance_slack(population) * (len(population) / n) ** 0.5, n)
    sims = 4000
    low_fails = 0
    for _ in range(sims):
        docs = _documents(rng, n)
        gate = acceptance_gate("t", _counts(docs), refs, slack=acceptance_slack(docs))
        low_fails += gate["verdict"] == "FAIL" and gate["acceptance_length"] < ref
    assert abs(low_fails / sims - stated.alpha) < 3 * (stated.alpha / sims) ** 0.5 + 0.002
    sims = 1000
    mde_fails = 0
    for _ in range(sims):
        docs = _lowered(_documents(rng, n), stated.mde)
        mde_fails += acceptance_gate("t", _counts(docs), refs, slack=acceptance_slack(docs))["verdict"] == "FAIL"
    assert 0.72 < mde_fails / sims < 0.88


def _counts(docs: list[tuple[float, float]]) -> dict:
    return {
        "num_cycles": sum(c for c, _ in docs),
        "num_accepted_drafts": sum(a for _, a in docs),
        "accepted_per_position": [],
        "max_draft_len": 3,
    }


def _lowered(docs: list[tuple[int, int]], drop: float) -> list[tuple[float, float]]:
    """Each document's AL times (1 - drop) with its output tokens (cycles + accepted) kept."""
    out = []
    for c, a in docs:
        al = (1 + a / c) * (1 - drop)
        cycles = (c + a) / al
        out.append((cycles, c + a - cycles))
    return out
