"""The per-request acceptance-length difference of two runs: a seeded paired bootstrap interval, and a flagged
drop when the whole interval lies below 0 (a collapsed drafter keeps greedy outputs, so accuracy, unchanged)."""

from __future__ import annotations

import json
import math
import random

import pytest
from specdec_eval.results.compare import compare_runs, render_compare
from specdec_eval.results.paired import paired_mean_difference

from .test_runs_table import make_run

N = 60


def _samples(lengths: list[float | None]) -> list[dict]:
    return [
        {"task": "gsm8k", "doc_id": d, "prompt_hash": f"p{d}", "output_token_ids": [1, 2, 3], "output_hash": "h",
         "acceptance_length": al, "correct[strict-match]": d % 2 == 0, "correct[flexible-extract]": d % 2 == 0}
        for d, al in enumerate(lengths)
    ]  # fmt: skip


def _summary(lengths: list[float | None]) -> dict:
    known = [x for x in lengths if x is not None]
    acceptance = {"acceptance_length": sum(known) / len(known)} if known else None
    return {"gsm8k": {"score": 50.0, "filter_scores": {"strict-match": 50.0, "flexible-extract": 50.0},
                      "verdict": "PASS", "acceptance": acceptance}}  # fmt: skip


def _pair(tmp_path, a: list[float | None], b: list[float | None]):
    run_a = make_run(tmp_path, 1, samples=_samples(a), tasks=_summary(a))
    run_b = make_run(tmp_path, 2, samples=_samples(b), tasks=_summary(b))
    return run_a, run_b


def _lengths(seed: int, mean: float, spread: float, n: int = N) -> list[float]:
    rng = random.Random(seed)
    return [round(max(1.0, rng.gauss(mean, spread)), 3) for _ in range(n)]


def test_a_collapsed_drafter_is_a_significant_drop(tmp_path):
    a = _lengths(1, 2.4, 0.5)
    b = _lengths(2, 1.05, 0.05)  # the drafter collapsed: ~1 token per step
    result = compare_runs(*_pair(tmp_path, a, b))
    per = result["tasks"]["gsm8k"]["acceptance"]["per_request"]
    assert per["n"] == N and per["unpaired"] == 0
    assert per["mean_delta"] == pytest.approx(sum(b) / N - sum(a) / N)
    lo, hi = per["ci"]
    assert lo < per["mean_delta"] < hi < 0 and per["significant_drop"] and not per["significant_rise"]
    assert result["acceptance_drops"] == ["gsm8k"]
    assert result["verdict"] == "no significant change"  # accuracy did not move: the verdict says so
    text = render_compare(result)
    assert "per request (60 paired)" in text and "SIGNIFICANT DROP" in text
    assert (
        text.rstrip().splitlines()[-1] == "ACCEPTANCE DROP: per-request acceptance length fell significantly in gsm8k"
    )
    assert json.loads(json.dumps(result)) == result


def test_noise_alone_is_not_a_drop_and_the_interval_is_seeded(tmp_path):
    a = _lengths(3, 2.4, 0.4)
    b = [x + random.Random(4 + i).choice((-0.05, 0.05)) for i, x in enumerate(a)]  # symmetric jitter
    run_a, run_b = _pair(tmp_path, a, b)
    first = compare_runs(run_a, run_b)["tasks"]["gsm8k"]["acceptance"]["per_request"]
    assert first["ci"][0] < 0 < first["ci"][1] and not first["significant_drop"] and not first["significant_rise"]
    assert compare_runs(run_a, run_b)["tasks"]["gsm8k"]["acceptance"]["per_request"] == first  # same seed
    other = compare_runs(run_a, run_b, seed=7, resamples=3000)["tasks"]["gsm8k"]["acceptance"]["per_request"]
    assert other["seed"] == 7 and other["resamples"] == 3000 and other["ci"] != first["ci"]
    assert "SIGNIFICANT" not in render_compare(compare_runs(run_a, run_b)) and "ACCEPTANCE DROP" not in render_compare(
        compare_runs(run_a, run_b)
    )


def test_a_rise_is_flagged_as_a_rise(tmp_path):
    a = _lengths(5, 1.8, 0.3)
    result = compare_runs(*_pair(tmp_path, a, [x + 0.4 for x in a]))
    per = result["tasks"]["gsm8k"]["acceptance"]["per_request"]
    assert per["ci"] == [pytest.approx(0.4), pytest.approx(0.4)]  # a constant difference: the point interval
    assert per["significant_rise"] and not per["significant_drop"] and result["acceptance_drops"] == []


def test_a_side_without_spec_dec_has_no_per_request_difference(tmp_path):
    a = [None] * N  # the non-speculative baseline
    result = compare_runs(*_pair(tmp_path, a, _lengths(6, 2.0, 0.3)))
    acc = result["tasks"]["gsm8k"]["acceptance"]
    assert acc["per_request"] is None and acc["a"] is None and acc["b"] is not None
    assert "per request" not in render_compare(result)
    partial = [None if d < 10 else x for d, x in enumerate(_lengths(7, 2.0, 0.3))]
    per = compare_runs(*_pair(tmp_path / "p", partial, _lengths(8, 2.0, 0.3)))["tasks"]["gsm8k"]["acceptance"]
    assert per["per_request"]["n"] == N - 10 and per["per_request"]["unpaired"] == 10


def test_the_interval_agrees_with_the_normal_theory_interval():
    rng = random.Random(11)
    a = [rng.gauss(2.2, 0.5) for _ in range(400)]
    b = [x - 0.1 + rng.gauss(0.0, 0.3) for x in a]
    res = paired_mean_difference(a, b, seed=3)
    d = [y - x for x, y in zip(a, b, strict=True)]
    mean = sum(d) / len(d)
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (len(d) - 1))
    half = 1.96 * sd / math.sqrt(len(d))
    assert res["ci"][0] == pytest.approx(mean - half, abs=0.15 * half)
    assert res["ci"][1] == pytest.approx(mean + half, abs=0.15 * half)


def test_paired_mean_difference_edge_cases():
    assert paired_mean_difference([], [])["ci"] is None
    one = paired_mean_difference([2.0], [1.0])
    assert one["ci"] is None and one["mean_delta"] == -1.0 and not one["significant_drop"]
    with pytest.raises(ValueError, match="length"):
        paired_mean_difference([1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="confidence"):
        paired_mean_difference([1.0, 2.0], [1.0, 2.0], confidence=1.5)
