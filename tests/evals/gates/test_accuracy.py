"""The accuracy gate: TensorRT-LLM's threshold and theta formulas, its report format, the floor rule, and a
simulation of the verdict's error rates."""

from __future__ import annotations

import math

import numpy as np
import pytest
from specdec_eval.stats.hypothesis import HypothesisTest


@pytest.fixture(autouse=True)
def _collect_engines():
    """Overrides conftest's per-test gc.collect: no engines are built here."""
    yield


# n -> (sqrt(2 sigma^2 / n), theta, threshold - ref): the TRT-LLM table (sigma 50, alpha 0.05, beta 0.2)
TABLE = {1319: (1.9470, 4.841, -3.203), 198: (5.0252, 12.495, -8.266), 300: (4.0825, 10.151, -6.715)}


@pytest.mark.parametrize("n", sorted(TABLE))
def test_table_values(n):
    scale, theta, offset = TABLE[n]
    test = HypothesisTest(ref_accuracy=50.0, num_samples=n)
    assert round(math.sqrt(2 * test.sigma**2 / n), 4) == scale
    assert round(test.theta, 3) == theta
    assert round(test.threshold - 50.0, 3) == offset


def test_readme_check_n4096():
    test = HypothesisTest(ref_accuracy=0.0, num_samples=4096)
    assert round(test.theta, 6) == 2.747193
    assert round(test.threshold, 6) == -1.817324


@pytest.mark.parametrize(
    "ref, n, threshold",
    [(74.20, 1319, 70.997), (90.3, 1319, 87.097), (65.0, 198, 56.734), (64.0, 198, 55.734)],
    ids=["llama-3.1-8b-gsm8k", "gpt-oss-120b-gsm8k", "gpt-oss-120b-gpqa", "gpt-oss-120b-gpqa-eagle3"],
)
def test_published_thresholds(ref, n, threshold):
    assert round(HypothesisTest(ref_accuracy=ref, num_samples=n).threshold, 3) == threshold


def test_defaults_and_z_values():
    test = HypothesisTest(ref_accuracy=74.2, num_samples=1319)
    assert (test.alpha, test.beta, test.sigma, test.higher_is_better) == (0.05, 0.2, 50.0, True)
    scale = math.sqrt(2 * 50.0**2 / 1319)
    assert test.threshold == pytest.approx(74.2 - 1.644854 * scale, abs=1e-5)
    assert test.theta == pytest.approx((1.644854 + 0.841621) * scale, abs=1e-5)


def test_lower_is_better_flips_the_sign():
    hi = HypothesisTest(ref_accuracy=10.0, num_samples=300)
    lo = HypothesisTest(ref_accuracy=10.0, num_samples=300, higher_is_better=False)
    assert lo.threshold - 10.0 == pytest.approx(-(hi.threshold - 10.0))
    assert lo.threshold == pytest.approx(16.715, abs=1e-3)
    assert lo.theta == pytest.approx(hi.theta)
    assert lo.passes(12.0) and not lo.passes(17.0)
    assert hi.passes(12.0) and not hi.passes(3.0)
    assert lo.verdict(17.0) == "FAIL" and lo.verdict(5.0) == "PASS"
    assert lo.can_fail  # the floor rule is for higher-is-better scores only


def test_threshold_itself_passes():
    test = HypothesisTest(ref_accuracy=74.2, num_samples=1319)
    assert test.passes(test.threshold)
    assert not test.passes(test.threshold - 1e-9)


def test_overrides_change_the_numbers():
    base = HypothesisTest(ref_accuracy=50.0, num_samples=1319)
    assert HypothesisTest(ref_accuracy=50.0, num_samples=1319, sigma=25.0).theta == pytest.approx(base.theta / 2)
    assert HypothesisTest(ref_accuracy=50.0, num_samples=4 * 1319).theta == pytest.approx(base.theta / 2)
    assert HypothesisTest(ref_accuracy=50.0, num_samples=1319, alpha=0.01).threshold < base.threshold
    assert HypothesisTest(ref_accuracy=50.0, num_samples=1319, beta=0.1).theta > base.theta


@pytest.mark.parametrize(
    "kwargs", [{"num_samples": 0}, {"alpha": 0.0}, {"alpha": 1.0}, {"beta": 0.0}, {"beta": 1.5}], ids=str
)
def test_bad_parameters(kwargs):
    with pytest.raises(ValueError):
        HypothesisTest(**{"ref_accuracy": 50.0, "num_samples": 100, **kwargs})


TRT_REPORT_LINES = [
    "=" * 59,
    "= ACCURACY HYPOTHESIS TESTING",
    "Alpha (Type I:  False Positive): 0.050",
    "Beta  (Type II: False Negative): 0.200",
    "Sigma (Standard deviation): 50.000",
    "#Samples: 1319",
    "Higher is better: True",
    "Theta (Minimum detectable effect): 4.841",
    "Reference accuracy: 74.200",
    "Threshold: 70.997",
]


def test_report_has_the_trtllm_lines_in_order():
    report = HypothesisTest(ref_accuracy=74.2, num_samples=1319).report()
    lines = report.splitlines()
    assert lines[:3] == ["=" * 59, "= ACCURACY HYPOTHESIS TESTING", "=" * 59]
    assert lines[3:] == TRT_REPORT_LINES[2:] + ["=" * 59]
    assert "Evaluated" not in report and "cannot fail" not in report


def test_report_with_accuracy():
    report = HypothesisTest(ref_accuracy=74.2, num_samples=1319).report(72.5)
    lines = report.splitlines()
    assert lines[-3:] == ["Evaluated accuracy: 72.500", "Verdict: PASS", "=" * 59]
    assert HypothesisTest(ref_accuracy=74.2, num_samples=1319).report(70.0).splitlines()[-2] == "Verdict: FAIL"


def test_report_metric_name():
    report = HypothesisTest(ref_accuracy=74.2, num_samples=1319, metric_name="exact_match").report(80.0)
    assert "= EXACT_MATCH HYPOTHESIS TESTING" in report
    assert "Reference exact_match: 74.200" in report and "Evaluated exact_match: 80.000" in report


def test_near_floor_reference_cannot_fail():
    test = HypothesisTest(ref_accuracy=1.2, num_samples=1319, floor=0.0)
    assert test.threshold == pytest.approx(1.2 - 3.2025, abs=1e-3) and test.threshold < 0
    assert not test.can_fail
    assert test.verdict(0.0) == "NO-GATE"  # even a model with nothing right "passes": we say it means nothing
    report = test.report(0.0)
    assert "this gate cannot fail at this n" in report
    assert "threshold -2.003 is at or below the floor 0.000" in report
    assert "Verdict: NO-GATE" in report


def test_normal_reference_can_fail():
    test = HypothesisTest(ref_accuracy=74.2, num_samples=1319)
    assert test.can_fail
    assert test.verdict(71.0) == "PASS" and test.verdict(70.9) == "FAIL"
    assert "cannot fail" not in test.report(71.0)


def test_gpqa_chance_floor():
    weak = HypothesisTest(ref_accuracy=30.0, num_samples=198, floor=25.0)
    assert weak.threshold == pytest.approx(21.734, abs=1e-3)
    assert not weak.can_fail and weak.verdict(25.0) == "NO-GATE"
    assert "a model answering at random passes this gate" in weak.report()
    strong = HypothesisTest(ref_accuracy=65.0, num_samples=198, floor=25.0)
    assert strong.can_fail and strong.verdict(56.0) == "FAIL" and strong.verdict(57.0) == "PASS"
    # a threshold exactly at the floor still cannot fail (a floor model reaches it)
    at_floor = HypothesisTest(ref_accuracy=40.0, num_samples=198, floor=HypothesisTest(40.0, 198).threshold)
    assert at_floor.threshold == at_floor.floor and not at_floor.can_fail


# --- simulation ----------------------------------------------------------------------------------------

RUNS = 4000
N = 1319


def _fail_rate(test: HypothesisTest, p: float, seed: int) -> float:
    """Fraction of RUNS simulated runs of N per-sample Bernoulli(p) answers whose verdict is FAIL."""
    rng = np.random.default_rng(seed)
    fails = 0
    for start in range(0, RUNS, 500):  # 500 x 1319 booleans per chunk keeps memory small
        correct = rng.random((min(500, RUNS - start), N)) < p
        accuracies = 100.0 * correct.mean(axis=1)
        fails += sum(test.verdict(float(a)) == "FAIL" for a in accuracies)
    return fails / RUNS


def _binomial_sd(rate: float) -> float:
    return math.sqrt(rate * (1 - rate) / RUNS)


@pytest.mark.parametrize("p", [0.5, 0.742])
def test_simulated_false_fail_rate_is_at_most_alpha(p):
    """A run whose true accuracy equals the reference fails at most alpha of the time.

    The formula is TensorRT-LLM's two-sample test: it charges sqrt(2 sigma^2 / n), the noise of the run AND of
    the reference measurement. Against a reference that is a fixed number, only the run's own noise remains,
    sd = 100 sqrt(p(1-p)/n), so the false-FAIL rate is Phi(z_alpha * sqrt(2) * 50 / (100 sqrt(p(1-p)))):
    about 1.0 % at p = 0.5 and about 0.4 % at p = 0.742. sigma = 50 is the worst case of a Bernoulli score
    (p(1-p) is largest at p = 0.5), so at p = 0.742 the true sd (43.8) is smaller than the sigma the threshold
    assumes, and the rate drops further below alpha. Either way it must stay under alpha.
    """
    test = HypothesisTest(ref_accuracy=100.0 * p, num_samples=N)
    rate = _fail_rate(test, p, seed=1234 + int(p * 1000))
    alpha = test.alpha
    assert rate <= alpha + 3 * math.sqrt(alpha * (1 - alpha) / RUNS)
    # and it matches the normal approximation of the one-sided rate against a fixed reference
    z = (test.threshold - 100.0 * p) / (100.0 * math.sqrt(p * (1 - p) / N))
    expected = 0.5 * math.erfc(-z / math.sqrt(2))
    assert abs(rate - expected) <= 3 * _binomial_sd(expected) + 0.003  # + lattice / continuity slack


def test_simulated_power_at_theta():
    """A run whose true accuracy is ref - theta fails with probability at least 1 - beta (p = 0.5, where
    sigma = 50 is exact for the run; its true sd at 0.5 - theta/100 is a little smaller, which only helps)."""
    p = 0.5
    test = HypothesisTest(ref_accuracy=100.0 * p, num_samples=N)
    true_p = p - test.theta / 100.0
    power = _fail_rate(test, true_p, seed=99)
    target = 1 - test.beta
    assert power >= target - 3 * _binomial_sd(target)
    # with a fixed reference the power is Phi(-z_beta * sqrt(2)) ~ 0.88 (see the false-FAIL docstring)
    z = (test.threshold - 100.0 * true_p) / (100.0 * math.sqrt(true_p * (1 - true_p) / N))
    expected = 0.5 * math.erfc(-z / math.sqrt(2))
    assert abs(power - expected) <= 3 * _binomial_sd(expected) + 0.01
