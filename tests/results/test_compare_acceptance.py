"""Acceptance paired by document in `compare`: the relative change of the cycle-weighted AL, its standard error with
documents as clusters, and the verdict (a drop shown, a 5 % drop ruled out, or what this n could see). A collapsed
drafter keeps greedy outputs, so accuracy, unchanged: only this test sees it."""

from __future__ import annotations

import json
import random

import pytest
from specdec_eval.results.acceptance_paired import paired_counts
from specdec_eval.results.compare import compare_runs, render_compare
from specdec_eval.stats.acceptance_ratio import (
    DROP,
    INCONCLUSIVE,
    NO_DROP,
    judge_pairs,
    paired_acceptance,
    paired_acceptance_test,
    swap_p_values,
)

from .test_runs_table import make_run

N = 60


def _samples(counts: list[tuple[int, int] | None], lengths_only: bool = False) -> list[dict]:
    """One sample per document with (cycles, accepted drafts), or None for a side that did not speculate."""
    out = []
    for d, c in enumerate(counts):
        acceptance = None if c is None or lengths_only else {"num_cycles": c[0], "num_accepted_drafts": c[1]}
        out.append(
            {
                "task": "gsm8k",
                "doc_id": d,
                "prompt_hash": f"p{d}",
                "output_token_ids": [1, 2, 3],
                "output_hash": "h",
                "acceptance_length": None if c is None else 1 + c[1] / c[0],
                "acceptance": acceptance,
                "correct[strict-match]": d % 2 == 0,
                "correct[flexible-extract]": d % 2 == 0,
            }
        )
    return out


def _summary(counts: list[tuple[int, int] | None]) -> dict:
    known = [c for c in counts if c is not None]
    acceptance = {"acceptance_length": 1 + sum(a for _, a in known) / sum(c for c, _ in known)} if known else None
    return {
        "gsm8k": {
            "score": 50.0,
            "filter_scores": {"strict-match": 50.0, "flexible-extract": 50.0},
            "verdict": "PASS",
            "acceptance": acceptance,
        }
    }


def _pair(tmp_path, a, b, lengths_only: bool = False):
    run_a = make_run(tmp_path, 1, samples=_samples(a, lengths_only), tasks=_summary(a))
    run_b = make_run(tmp_path, 2, samples=_samples(b, lengths_only), tasks=_summary(b))
    return run_a, run_b


def _documents(seed: int, n: int = N, rate: float = 0.33) -> list[tuple[int, int]]:
    """Documents of 20-80 cycles whose acceptance per draft slot varies from document to document."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        cycles = rng.randint(20, 80)
        p = min(0.95, max(0.02, rng.gauss(rate, 0.12)))
        out.append((cycles, sum(rng.random() < p for _ in range(3 * cycles))))
    return out


def _scaled(docs: list[tuple[int, int]], factor: float, seed: int, jitter: float = 0.0) -> list[tuple[int, int]]:
    """The same documents with accepted drafts scaled by `factor` (+ per-document noise of sd `jitter` cycles)."""
    rng = random.Random(seed)
    return [(c, max(0, round(a * factor + rng.gauss(0.0, jitter)))) for c, a in docs]


def _per_document(result: dict) -> dict:
    return result["tasks"]["gsm8k"]["acceptance"]["per_document"]


def test_a_collapsed_drafter_is_a_drop(tmp_path):
    a = _documents(1)
    b = [(c, round(0.02 * c)) for c, _ in a]  # the drafter collapsed: ~1 token per step
    result = compare_runs(*_pair(tmp_path, a, b))
    per = _per_document(result)
    assert per["n"] == N and per["unpaired"] == 0 and per["weighted"]
    assert per["verdict"] == DROP and per["drop_shown"] and not per["drop_ruled_out"] and per["relative"] < -0.3
    assert result["acceptance_drops"] == ["gsm8k"]
    assert result["verdict"] == "no significant change"  # accuracy did not move: the verdict says so
    text = render_compare(result)
    assert f"paired by document ({N})" in text and "SIGNIFICANT DROP" in text
    assert text.rstrip().splitlines()[-1] == (
        "ACCEPTANCE DROP: per-document acceptance length fell significantly in gsm8k"
    )
    assert json.loads(json.dumps(result)) == result


def test_identical_runs_rule_out_a_drop_and_noise_alone_is_not_one(tmp_path):
    a = _documents(3)
    same = _per_document(compare_runs(*_pair(tmp_path / "same", a, list(a))))
    assert same["verdict"] == NO_DROP and same["relative"] == 0.0 and same["std_error"] == 0.0
    jittered = _scaled(a, 1.0, seed=4, jitter=2.0)  # every document moves a little, both ways
    run_a, run_b = _pair(tmp_path / "noise", a, jittered)
    first = _per_document(compare_runs(run_a, run_b))
    assert not first["drop_shown"] and first["std_error"] > 0
    assert _per_document(compare_runs(run_a, run_b)) == first  # arithmetic: the same two runs, the same record
    assert "ACCEPTANCE DROP" not in render_compare(compare_runs(run_a, run_b))


def test_a_five_percent_drop_is_shown_on_sixty_documents_and_a_rise_is_a_rise(tmp_path):
    a = _documents(5)
    b = _scaled(a, 0.95, seed=6, jitter=0.5)  # accepted drafts down 5 %: AL (about 2) down about 2.5 %
    per = _per_document(compare_runs(*_pair(tmp_path / "drop", a, b)))
    assert per["verdict"] == DROP and -0.04 < per["relative"] < -0.015
    rise = compare_runs(*_pair(tmp_path / "rise", a, _scaled(a, 1.2, seed=7)))
    assert _per_document(rise)["rise_shown"] and rise["acceptance_drops"] == []
    assert "significant rise" in render_compare(rise)


def test_the_statistic_is_the_cycle_weighted_ratio_of_the_runs():
    """One long document with a low AL pulls the runs' AL (a ratio of sums) where a mean of per-document ALs
    would not: the test is about the AL the runs report."""
    a = [(10, 10), (10, 10), (200, 40)]
    b = [(10, 10), (10, 10), (200, 20)]
    e = paired_acceptance(list(zip(a, b, strict=True)))
    assert e.al_a == pytest.approx(1 + 60 / 220) and e.al_b == pytest.approx(1 + 40 / 220)
    assert e.relative == pytest.approx((1 + 40 / 220) / (1 + 60 / 220) - 1)


def test_the_standard_error_agrees_with_resampling_the_documents():
    """The delta-method SE, documents as clusters, against the spread of the statistic over documents resampled
    with replacement (2000 draws): within 10 %."""
    a = _documents(8, n=200)
    b = _scaled(a, 0.97, seed=9, jitter=3.0)
    pairs = list(zip(a, b, strict=True))
    e = paired_acceptance(pairs)
    rng = random.Random(10)
    draws = [paired_acceptance([rng.choice(pairs) for _ in pairs]).relative for _ in range(2000)]
    mean = sum(draws) / len(draws)
    spread = (sum((x - mean) ** 2 for x in draws) / (len(draws) - 1)) ** 0.5
    assert e.std_error == pytest.approx(spread, rel=0.10)


def test_cycles_inside_a_document_are_not_the_units():
    """The same drop in total (120 accepted drafts fewer over 2000 cycles), spread over every document or all in
    four: a model with cycles as the units sees the same evidence in both; with documents as clusters the
    concentrated drop is far less certain, as it should be (four documents could be four odd texts)."""
    a = [(50, 50)] * 40
    spread = [(50, 47 + (d % 2)) for d in range(20)] + [(50, 46 + (d % 2)) for d in range(20)]
    concentrated = [(50, 20)] * 4 + [(50, 50)] * 36
    assert sum(x for _, x in spread) == sum(x for _, x in concentrated) == 1880
    e_spread = paired_acceptance(list(zip(a, spread, strict=True)))
    e_concentrated = paired_acceptance(list(zip(a, concentrated, strict=True)))
    assert e_spread.relative == pytest.approx(e_concentrated.relative)
    assert e_concentrated.std_error > 5 * e_spread.std_error


def test_a_side_without_spec_dec_has_no_paired_test_and_partial_pairs_are_counted(tmp_path):
    a = [None] * N  # the non-speculative baseline
    result = compare_runs(*_pair(tmp_path, a, _documents(6)))
    acc = result["tasks"]["gsm8k"]["acceptance"]
    assert acc["per_document"] is None and acc["a"] is None and acc["b"] is not None
    assert "paired by document" not in render_compare(result)
    partial = [None if d < 10 else x for d, x in enumerate(_documents(7))]
    per = _per_document(compare_runs(*_pair(tmp_path / "p", partial, _documents(7))))
    assert per["n"] == N - 10 and per["unpaired"] == 10


def test_runs_without_counts_fall_back_to_per_document_lengths(tmp_path):
    a = _documents(11)
    b = [(c, round(0.02 * c)) for c, _ in a]
    per = _per_document(compare_runs(*_pair(tmp_path, a, b, lengths_only=True)))
    assert not per["weighted"] and per["verdict"] == DROP and "each weighing one" in per["method"]
    counts, weighted = paired_counts([({"acceptance_length": 2.0}, {"acceptance_length": 1.5})])
    assert counts == [((1.0, 1.0), (1.0, 0.5))] and not weighted


def test_inconclusive_says_what_this_n_sees_and_edge_cases():
    a = _documents(12, n=6)
    b = _scaled(a, 0.97, seed=13, jitter=15.0)
    test = paired_acceptance_test(paired_acceptance(list(zip(a, b, strict=True))))
    assert test.verdict == INCONCLUSIVE and test.detectable_drop > 0.05 and test.documents_for_drop > 6
    assert f"needs about {test.documents_for_drop} documents" in test.reason
    one = paired_acceptance_test(paired_acceptance([((10, 10), (10, 5))]))
    assert one.verdict == INCONCLUSIVE and one.p_drop is None
    assert paired_acceptance([((0, 0), (10, 5))]) is None  # a document that drafted nothing is no pair
    with pytest.raises(ValueError, match="alpha"):
        paired_acceptance_test(paired_acceptance([((10, 10), (10, 5))] * 3), alpha=1.5)


@pytest.mark.parametrize("n", [20, 60])
def test_error_rates_by_simulation(n):
    """Documents like the embedded default's (20-80 cycles, per-document rates spread around 0.33), paired runs
    whose per-document acceptance differs by noise only (no change), or by 5 % of AL: the false DROP rate stays
    near alpha = 0.05 and a NO-DROP under a 5 % drop stays near beta = 0.2 or below."""
    rng = random.Random(n)
    false_drop = false_no_drop = 0
    sims = 400
    for i in range(sims):
        a = _documents(rng.randrange(10**9), n=n)
        same = _scaled(a, 1.0, seed=i, jitter=3.0)
        dropped = [(c, max(0, round(x - 0.05 * (c + x) + rng.gauss(0.0, 3.0)))) for c, x in a]  # AL 5 % lower
        false_drop += paired_acceptance_test(paired_acceptance(list(zip(a, same, strict=True)))).drop_shown
        false_no_drop += (
            paired_acceptance_test(paired_acceptance(list(zip(a, dropped, strict=True)))).verdict == NO_DROP
        )
    assert false_drop / sims < 0.05 + 3 * (0.05 * 0.95 / sims) ** 0.5
    assert false_no_drop / sims < 0.2 + 3 * (0.2 * 0.8 / sims) ** 0.5


def test_the_swap_test_is_exact_where_the_t_is_not():
    """Ten documents whose two sides differ by skewed, heavy-tailed noise and no drop (which side got the noise is a
    coin flip): the t shows a drop too often; exchanging the sides (all 1024 ways) does not. A drop on every one of
    ten documents has swap p = 1 / 1024."""
    rng = random.Random(21)
    sims, by_t, by_swaps = 600, 0, 0
    for _ in range(sims):
        pairs = []
        for c, a in _documents(rng.randrange(10**9), n=10):
            noisy = (c, max(0, round(a * rng.lognormvariate(0.0, 0.6))))
            pairs.append(((c, a), noisy) if rng.random() < 0.5 else (noisy, (c, a)))
        by_t += paired_acceptance_test(paired_acceptance(pairs)).drop_shown
        by_swaps += judge_pairs(pairs).drop_shown
    assert by_swaps / sims <= 0.05 + 3 * (0.05 * 0.95 / sims) ** 0.5 < by_t / sims
    lower, upper, how = swap_p_values([((10, 8), (10, 5))] * 10)
    assert (lower, upper, how) == (1 / 1024, 1.0, "all 1024 exchanges")
    many = judge_pairs([((10, 8), (10, 5 + d % 2)) for d in range(40)])
    assert many.drop_shown and "4096 random exchanges, seed 0" in many.method
