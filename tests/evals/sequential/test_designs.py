"""Sequential verdicts: the group-sequential accuracy gate and the paired SPRT, checked by simulation.

The simulations here are the tests' own (vectorised numpy, seeded) and use only the designs' published
boundaries, so they are independent of the numerical integration and the exact recursion that calibrate them.
A simulated sample is Bernoulli correct (score 0 or 100): the worst case for the variance of a mean; the real
per-sample score, the mean of two filters (0, 50 or 100), varies less (one test checks that case too).
Tolerances are one-sided, three Monte-Carlo standard errors.
"""

from __future__ import annotations

import functools
import io
import json
import math
from contextlib import redirect_stdout

import numpy as np
import pytest
from specdec_eval.evals.sequential.accuracy import AccuracySequentialDesign
from specdec_eval.evals.sequential.discordant_pairs import PairedSequentialDesign, fixed_pairs_needed
from specdec_eval.stats.group_sequential import Spending
from specdec_eval.stats.hypothesis import HypothesisTest
from specdec_eval.studies.sequential_table import main as table_main


@pytest.fixture(autouse=True)
def _collect_engines():
    """Overrides conftest's per-test gc.collect: no engines are built here."""
    yield


SIMS = 10_000
ALPHA, BETA = 0.05, 0.2
# (ref, N, batch): GSM8K in batches of 64 at the Llama-3.1-8B and GPT-OSS references and at 50 (the largest
# Bernoulli variance); GPQA-Diamond (198) in batches of 32 and 16.
SETTINGS = [(74.2, 1319, 64), (90.3, 1319, 64), (50.0, 1319, 64), (65.0, 198, 32), (50.0, 198, 16)]
IDS = [f"ref{r}-N{n}-b{b}" for r, n, b in SETTINGS]


@functools.cache
def design(ref: float, n: int, batch: int) -> AccuracySequentialDesign:
    return AccuracySequentialDesign.for_batches(ref, n, batch)


def upper_bound(rate: float) -> float:
    return rate + 3 * math.sqrt(rate * (1 - rate) / SIMS)


def lower_bound(rate: float) -> float:
    return rate - 3 * math.sqrt(rate * (1 - rate) / SIMS)


def simulate(d: AccuracySequentialDesign, mean: float, seed: int, reference_noise=False, two_filters=False):
    """Fraction of runs that FAIL and the mean stopping n, from the design's score-scale boundary table."""
    rng = np.random.default_rng(seed)
    rows = d.boundaries()
    n = np.array([r["n"] for r in rows])
    fail_below = np.array([r["fail_below"] for r in rows])
    pass_at = np.array([np.inf if r["pass_at"] is None else r["pass_at"] for r in rows])
    steps = np.diff(n, prepend=0)
    p = mean / 100
    if two_filters:  # the second filter copies the first on 80 % of samples, else is independent: 0, 50, 100
        copy = 0.8
        full, half = copy * p + (1 - copy) * p * p, 2 * (1 - copy) * p * (1 - p)
        counts = rng.multinomial(steps, [full, half, 1 - full - half], size=(SIMS, len(n)))
        points = 100.0 * counts[..., 0] + 50.0 * counts[..., 1]
    else:
        points = 100.0 * rng.binomial(steps, p, size=(SIMS, len(n)))
    score = np.cumsum(points, axis=1) / n
    if reference_noise:  # the reference itself the mean of N Bernoulli samples: the boundaries move with it
        score = score - (100.0 * rng.binomial(d.n_max, d.ref / 100, size=(SIMS, 1)) / d.n_max - d.ref)
    fail, passed = score < fail_below, score >= pass_at
    stop = fail | passed
    stop[:, -1] = True
    first_stop = np.argmax(stop, axis=1)
    return fail[np.arange(SIMS), first_stop].mean(), n[first_stop].mean()


@pytest.mark.parametrize("ref, n, batch", SETTINGS, ids=IDS)
def test_false_fail_rate_at_the_reference_stays_below_alpha(ref, n, batch):
    d = design(ref, n, batch)
    rate, expected_n = simulate(d, ref, seed=1)
    assert rate <= upper_bound(ALPHA)
    assert expected_n < 0.8 * n  # good runs stop early


@pytest.mark.parametrize("ref, n, batch", SETTINGS, ids=IDS)
def test_power_at_ref_minus_theta_stays_above_one_minus_beta(ref, n, batch):
    d = design(ref, n, batch)
    assert d.theta == pytest.approx(HypothesisTest(ref, n).theta)  # the fixed gate's theta at N
    power, expected_n = simulate(d, ref - d.theta, seed=2)
    assert power >= lower_bound(1 - BETA)
    assert expected_n < n


@pytest.mark.parametrize("ref, n, batch", [SETTINGS[0], SETTINGS[3]], ids=[IDS[0], IDS[3]])
def test_two_sample_model_keeps_alpha_and_matches_the_computed_power(ref, n, batch):
    """With the reference a noisy mean of N samples (the fixed gate's own model), false FAIL stays <= alpha and
    the power is what the numerical integration says: a few points under 1 - beta, the Neyman-Pearson price
    of stopping early on the same N samples (the fixed gate sits exactly at 1 - beta there)."""
    d = design(ref, n, batch)
    rate, _ = simulate(d, ref, seed=3, reference_noise=True)
    assert rate <= upper_bound(ALPHA)
    computed = d.operating_characteristics(ref - d.theta).p_fail
    power, _ = simulate(d, ref - d.theta, seed=4, reference_noise=True)
    # the Bernoulli variance at ref - theta is below sigma^2: the simulated power is at least the computed one
    assert power >= computed - 3 * math.sqrt(computed * (1 - computed) / SIMS)
    assert 1 - BETA - 0.05 < computed < 1 - BETA


def test_two_filter_scores_keep_alpha():
    d = design(74.2, 1319, 64)
    rate, _ = simulate(d, 74.2, seed=5, two_filters=True)
    assert rate <= upper_bound(ALPHA)


def test_numerical_integration_agrees_with_a_gaussian_simulation():
    """The recursion against direct simulation of the canonical process it integrates."""
    d = design(74.2, 1319, 64)
    rows = d.boundaries()
    n = np.array([r["n"] for r in rows], dtype=float)
    info = 1 / (d.sigma**2 / n + d.sigma**2 / d.n_max)
    z_fail = np.array([r["z_fail"] for r in rows])
    z_pass = np.array([r["z_pass"] for r in rows])
    rng = np.random.default_rng(6)
    sims = 40_000
    for mean in (74.2, 74.2 - d.theta, 72.0):
        drift = mean - d.ref
        d_info = np.diff(info, prepend=0)
        z = np.cumsum(rng.normal(drift * d_info, np.sqrt(d_info), size=(sims, len(n))), axis=1) / np.sqrt(info)
        fail, passed = z < z_fail, z >= z_pass
        stop = fail | passed
        stop[:, -1] = True
        first = np.argmax(stop, axis=1)
        simulated = fail[np.arange(sims), first].mean()
        computed = d.operating_characteristics(mean)
        assert abs(simulated - computed.p_fail) < 3.5 * math.sqrt(computed.p_fail * (1 - computed.p_fail) / sims)
        assert n[first].mean() == pytest.approx(computed.expected_n, rel=0.02)


def test_fail_boundaries_spend_exactly_alpha():
    d = design(74.2, 1319, 64)
    only_fail = np.full(len(d.looks), np.inf)
    only_fail[-1] = d.z_fail[-1]
    from specdec_eval.stats.group_sequential import crossing_probabilities

    info = 1 / (d.sigma**2 / np.array(d.looks) + d.sigma**2 / d.n_max)
    p_fail, _ = crossing_probabilities(info, d.z_fail, only_fail, 0.0)
    assert p_fail.sum() == pytest.approx(ALPHA, abs=1e-6)
    assert -1.75 < d.z_fail[-1] < -1.645  # gamma = -8 keeps the last boundary close to the fixed gate's


@pytest.mark.parametrize("ref, n", [(74.2, 1319), (65.0, 198), (1.18, 1319), (17.68, 198)])
def test_a_single_look_is_the_fixed_gate(ref, n):
    floor = 25.0 if n == 198 else 0.0
    d = AccuracySequentialDesign(ref, n, (n,), floor=floor)
    fixed = HypothesisTest(ref, n, floor=floor)
    assert d.boundaries()[0]["fail_below"] == pytest.approx(fixed.threshold, abs=1e-6)
    for score in (0.0, fixed.threshold - 0.01, fixed.threshold + 0.01, ref, 100.0):
        if 0 <= score <= 100:
            assert d.decide(n, score).verdict == fixed.verdict(score)


def test_the_last_look_always_decides():
    d = design(74.2, 1319, 64)
    verdicts = {d.decide(1319, s).verdict for s in np.linspace(0, 100, 2001)}
    assert verdicts == {"PASS", "FAIL"}


def test_decide_follows_the_boundary_table():
    d = design(65.0, 198, 32)
    rng = np.random.default_rng(7)
    for row in d.boundaries():
        for score in rng.uniform(0, 100, 50):
            decision = d.decide(row["n"], float(score))
            expected = "FAIL" if score < row["fail_below"] else "CONTINUE"
            if row["pass_at"] is not None and score >= row["pass_at"]:
                expected = "PASS"
            assert decision.verdict == expected, decision.reason
            assert decision.look == row["look"] and decision.final == (expected != "CONTINUE")
            assert decision.to_dict()["boundary_fail"] == row["fail_below"]


def test_a_collapsed_model_fails_at_the_first_look():
    d = design(74.2, 1319, 64)
    decision = d.decide(64, 20.0)
    assert decision.verdict == "FAIL" and decision.n == 64
    assert "FAIL at 64/1319" in decision.reason and "70.997" in decision.reason


def test_floor_turns_pass_into_no_gate():
    """SmolLM2's GSM8K reference (1.18): the threshold is below 0 at any n, so the gate cannot fail a model
    scoring 0; as in HypothesisTest.verdict, a PASS reads NO-GATE."""
    d = AccuracySequentialDesign.for_batches(1.18, 1319, 64)
    assert not d.can_fail
    final = d.decide(1319, 0.0)
    assert final.verdict == "NO-GATE" and "cannot fail" in final.reason
    assert {d.decide(n, 1.18).verdict for n in d.looks} <= {"CONTINUE", "NO-GATE"}


def test_a_full_set_reference_and_sides_that_never_stop_early():
    fixed = HypothesisTest(74.2, 300).threshold
    # a subset run against a reference measured on all 1319: the reference's noise is smaller, the gate tighter
    tighter = AccuracySequentialDesign.for_batches(74.2, 300, 100, n_ref=1319)
    assert tighter.boundaries()[-1]["fail_below"] > fixed and tighter.to_dict()["n_ref"] == 1319
    # spending nothing before the last look: no early stop on either side, and the last look is the fixed gate
    late = AccuracySequentialDesign.for_batches(74.2, 300, 100, fail_spending="none", pass_spending="none")
    first = late.boundaries()[0]
    assert first["fail_below"] is None and first["pass_at"] is None
    assert late.decide(100, 0.0).verdict == "CONTINUE" and "[-inf, inf)" in late.decide(100, 0.0).reason
    assert late.boundaries()[-1]["fail_below"] == pytest.approx(fixed, abs=1e-6)


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="last look"):
        AccuracySequentialDesign(74.2, 1319, (64, 128))
    with pytest.raises(ValueError, match="strictly increasing"):
        AccuracySequentialDesign(74.2, 128, (64, 64, 128))
    with pytest.raises(ValueError, match="unknown spending"):
        AccuracySequentialDesign(74.2, 128, (64, 128), fail_spending="linear")
    d = design(65.0, 198, 32)
    with pytest.raises(ValueError, match="not one of this design's looks"):
        d.decide(33, 50.0)
    with pytest.raises(ValueError, match=r"\[0, 100\]"):
        d.decide(32, 101.0)


def test_expected_sample_size_by_simulation_agrees_with_the_tests_simulator():
    d = design(74.2, 1319, 64)
    point = d.expected_sample_size(74.2, sims=SIMS, seed=11)
    rate, expected_n = simulate(d, 74.2, seed=12)
    assert point.expected_n == pytest.approx(expected_n, rel=0.03)
    assert abs(point.p_fail - rate) < 0.01
    assert point.expected_n < 0.5 * 1319  # about 40 % of the fixed test's samples at the reference


@pytest.mark.parametrize("name", ["obf", "pocock", "power:2", "hsd:-8", "hsd:0", "none"])
def test_spending_functions_rise_to_the_level(name):
    t = np.linspace(0.01, 1, 100)
    spent = Spending(name).cumulative(t, 0.05)
    assert spent[-1] == pytest.approx(0.05) and np.all(np.diff(spent) >= -1e-15) and spent[0] >= 0


# --- the paired SPRT -----------------------------------------------------------------------------------------


def simulate_pairs(d: PairedSequentialDesign, p: float, seed: int, look_every: int = 1) -> float:
    """Fraction of runs deciding B-WORSE, from the design's published count thresholds."""
    rng = np.random.default_rng(seed)
    m = d.truncation
    better = np.cumsum(rng.random((SIMS, m)) < p, axis=1)
    worse_max = np.array([-1 if (t := d.thresholds(k)[0]) is None else t for k in range(1, m + 1)])
    same_min = np.array([k + 1 if (t := d.thresholds(k)[1]) is None else t for k in range(1, m + 1)])
    looked = np.zeros(m, dtype=bool)
    looked[look_every - 1 :: look_every] = True
    looked[-1] = True
    worse = (better <= worse_max) & looked
    stop = (worse | (better >= same_min)) & looked
    stop[:, -1] = True
    first = np.argmax(stop, axis=1)
    return worse[np.arange(SIMS), first].mean()


PAIRED = [1 / 3, 0.25, 0.4]


@pytest.mark.parametrize("p1", PAIRED)
def test_paired_false_b_worse_stays_below_alpha(p1):
    d = PairedSequentialDesign(p1=p1)
    assert simulate_pairs(d, 0.5, seed=21) <= upper_bound(ALPHA)
    # looking only after every 10 pairs keeps it too (Ville's inequality holds at any stopping time)
    assert simulate_pairs(d, 0.5, seed=22, look_every=10) <= upper_bound(ALPHA)


@pytest.mark.parametrize("p1", PAIRED)
def test_paired_power_at_p1_stays_above_one_minus_beta(p1):
    d = PairedSequentialDesign(p1=p1)
    assert simulate_pairs(d, p1, seed=23) >= lower_bound(1 - BETA)
    exact = d.operating_characteristics(p1)
    assert exact.p_worse >= 1 - BETA
    # on average it needs fewer discordant pairs than the fixed exact binomial test, under H0 and under H1
    fixed = fixed_pairs_needed(ALPHA, BETA, p1)
    assert exact.expected_pairs < fixed and d.operating_characteristics(0.5).expected_pairs < fixed


def test_paired_exact_recursion_agrees_with_simulation():
    d = PairedSequentialDesign()
    for p in (0.5, 1 / 3, 0.45):
        exact = d.operating_characteristics(p).p_worse
        assert abs(simulate_pairs(d, p, seed=24) - exact) < 3.5 * math.sqrt(exact * (1 - exact) / SIMS)
        assert abs(d.simulate(p, SIMS, seed=25).p_worse - exact) < 3.5 * math.sqrt(exact * (1 - exact) / SIMS)


def test_paired_decisions():
    d = PairedSequentialDesign()  # p1 = 1/3: log-LR +0.288 per B-worse pair, -0.405 per B-better pair
    assert d.decide(11, 0).verdict == "B-WORSE"  # 11 * 0.288 = 3.16 >= log 20 = 3.00
    assert d.decide(10, 0).verdict == "CONTINUE"
    assert d.decide(0, 4).verdict == "NO-DIFFERENCE"  # -1.62 <= log(0.2 / 0.95) = -1.56
    inconclusive = d.decide(5, 4, final=True)
    assert inconclusive.verdict == "NO-DIFFERENCE" and "inconclusive" in inconclusive.reason
    assert str(d.pairs_needed) in inconclusive.reason
    truncated = PairedSequentialDesign(max_pairs=20).decide(12, 8)
    assert truncated.verdict == "NO-DIFFERENCE" and "20 pairs" in truncated.reason
    for m in range(1, 60):
        worse_max, same_min = d.thresholds(m)
        for x in range(m + 1):
            verdict = d.decide(m - x, x).verdict
            if worse_max is not None and x <= worse_max:
                assert verdict == "B-WORSE"
            elif same_min is not None and x >= same_min:
                assert verdict == "NO-DIFFERENCE"
            else:
                assert verdict == "CONTINUE"


def test_paired_scan_stops_at_the_first_crossing():
    d = PairedSequentialDesign()
    outcomes = [False] * 11 + [True] * 30  # 11 B-worse pairs cross first; what follows is not looked at
    decision = d.scan(outcomes)
    assert decision.verdict == "B-WORSE" and decision.n_pairs == 11
    assert d.scan([False, True, False]).verdict == "CONTINUE"
    assert d.scan([False, True, False], final=True).verdict == "NO-DIFFERENCE"


def test_paired_p1_from_an_accuracy_drop():
    # a drop of 5 points with 15 % of the documents discordant: B wins 1/3 of the discordant ones
    assert PairedSequentialDesign.p1_from_drop(5.0, 0.15) == pytest.approx(1 / 3)
    with pytest.raises(ValueError):
        PairedSequentialDesign.p1_from_drop(20.0, 0.1)
    with pytest.raises(ValueError, match="p1"):
        PairedSequentialDesign(p1=0.5)


# --- the command ---------------------------------------------------------------------------------------------


def run_table(*argv: str) -> str:
    out = io.StringIO()
    with redirect_stdout(out):
        assert table_main(list(argv)) == 0
    return out.getvalue()


def test_command_prints_sane_numbers():
    report = json.loads(run_table("--n", "1319", "--batch", "64", "--ref", "74.2", "--json"))
    rows = {(r["design"], r["model"]): r for r in report["accuracy"]["rows"]}
    fixed, seq = rows[("fixed-n", "two-sample model")], rows[("sequential", "two-sample model")]
    assert fixed["expected_n_at_ref"] == fixed["n_fixed"] == 1319
    assert fixed["false_fail"] == pytest.approx(0.05, abs=1e-4) and fixed["power"] == pytest.approx(0.8, abs=1e-3)
    assert seq["expected_n_at_ref"] < 0.5 * 1319 and seq["expected_n_at_alternative"] < 1319
    assert seq["false_fail"] <= 0.05
    simulated = rows[("sequential", "simulated")]
    assert simulated["false_fail"] <= upper_bound(ALPHA) and simulated["power"] >= lower_bound(1 - BETA)
    assert report["accuracy"]["design"]["fixed_threshold"] == pytest.approx(70.997, abs=1e-3)
    for row in report["paired"]["rows"]:
        assert row["expected_pairs_h0"] < row["m_fixed"] <= row["m_max"]
        assert row["false_b_worse"] <= upper_bound(ALPHA) and row["power"] >= lower_bound(1 - BETA)
    text = run_table("--n", "198", "--batch", "32", "--ref", "65.0", "--floor", "25", "--sims", "2000")
    assert "fixed-n threshold 56.734" in text and "E[N] at ref" in text and "false B-worse" in text


def test_command_help_has_an_example():
    out = io.StringIO()
    with redirect_stdout(out), pytest.raises(SystemExit) as stop:
        table_main(["--help"])
    assert stop.value.code == 0
    assert "example:" in out.getvalue() and "--n 1319 --batch 64 --ref 74.2" in out.getvalue()
