"""Paired statistics: the exact McNemar test, first divergence of two outputs, joining two runs' samples."""

from __future__ import annotations

import math

import pytest
from specdec_eval.results.paired import first_divergence, pair_samples
from specdec_eval.results.sample_record import SampleRecord
from specdec_eval.stats.mcnemar import mcnemar_exact


@pytest.mark.parametrize(
    ("b", "c", "p"),
    [
        (0, 5, 0.0625),  # 2 * (1/2)^5
        (5, 0, 0.0625),  # symmetric in b and c
        (3, 3, 1.0),  # 2 * P[X <= 3] > 1: capped
        (1, 9, 0.021484375),  # 2 * (1 + 10) / 1024
        (0, 0, 1.0),  # no discordant pairs: no evidence
        (0, 1, 1.0),
        (2, 10, 2 * (1 + 12 + 66) / 4096),
        (0, 12, 2 / 4096),
    ],
)
def test_mcnemar_known_values(b, c, p):
    assert mcnemar_exact(b, c) == pytest.approx(p, rel=1e-12)


def _normal_two_sided(b: int, c: int) -> float:
    """Continuity-corrected normal approximation of the same test."""
    z = (abs(b - c) - 1) / math.sqrt(b + c)
    return math.erfc(z / math.sqrt(2))


@pytest.mark.parametrize(("b", "c"), [(1000, 1000), (5000, 5100), (20000, 20400), (480, 560), (100000, 100900)])
def test_mcnemar_large_n_matches_the_normal_approximation(b, c):
    p = mcnemar_exact(b, c)
    assert 0.0 < p <= 1.0
    assert p == pytest.approx(_normal_two_sided(b, c), rel=0.02, abs=1e-4)


def test_mcnemar_exact_and_log_space_agree_across_the_switch():
    # n = 1000 is summed in integers, n = 1002 in log space; both sit on the same smooth curve.
    exact = mcnemar_exact(470, 530)
    logspace = mcnemar_exact(471, 531)
    assert exact == pytest.approx(_normal_two_sided(470, 530), rel=0.02)
    assert logspace == pytest.approx(_normal_two_sided(471, 531), rel=0.02)
    assert mcnemar_exact(0, 5000) == 0.0  # underflows cleanly, no OverflowError
    assert mcnemar_exact(2500, 2500) == 1.0


def test_mcnemar_rejects_negative_counts():
    with pytest.raises(ValueError, match="negative"):
        mcnemar_exact(-1, 3)


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ([1, 2, 3], [1, 2, 3], None),
        ([], [], None),
        (None, [], None),
        ([1, 2, 3], [1, 9, 3], 1),
        ([7, 2, 3], [1, 2, 3], 0),
        ([1, 2], [1, 2, 3, 4], 2),  # a prefix of b: diverges where a stops
        ([1, 2, 3, 4], [1, 2], 2),
        ([], [5], 0),
    ],
)
def test_first_divergence(a, b, expected):
    assert first_divergence(a, b) == expected


def _sample(task, doc, prompt="p", correct=True):
    return SampleRecord(task, doc, prompt_hash=f"{prompt}{doc}", correct={"flexible-extract": correct})


def test_pair_samples_joins_on_task_and_doc_id_and_reports_unpaired():
    a = [_sample("gsm8k", d) for d in (2, 0, 1, 5)] + [_sample("gpqa", 0)]
    b = [_sample("gsm8k", d) for d in (0, 1, 2, 3)] + [_sample("gpqa", 0)]
    pairs = pair_samples(a, b)
    assert list(pairs) == ["gsm8k", "gpqa"]
    assert [(x.doc_id, y.doc_id) for x, y in pairs["gsm8k"]] == [(0, 0), (1, 1), (2, 2)]
    assert len(pairs["gpqa"]) == 1
    assert pairs.unpaired == {"gsm8k": {"only_a": [5], "only_b": [3]}}


def test_pair_samples_tasks_in_one_run_only_are_unpaired():
    pairs = pair_samples([_sample("gsm8k", 0)], [_sample("gsm8k", 0), _sample("gpqa", 0), _sample("gpqa", 1)])
    assert list(pairs) == ["gsm8k"]
    assert pairs.unpaired == {"gpqa": {"only_a": [], "only_b": [0, 1]}}


def test_pair_samples_refuses_different_prompts():
    a = [_sample("gsm8k", d) for d in range(4)]
    b = [_sample("gsm8k", d, prompt="q" if d >= 2 else "p") for d in range(4)]
    with pytest.raises(ValueError, match=r"2 paired sample\(s\) have different prompts.*task 'gsm8k' doc 2"):
        pair_samples(a, b)


def test_pair_samples_refuses_duplicate_docs():
    with pytest.raises(ValueError, match="twice"):
        pair_samples([_sample("gsm8k", 0), _sample("gsm8k", 0)], [])
