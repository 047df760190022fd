"""The rules a lossless verdict's evidence and baseline must pass (evals/lossless/evidence.py, baseline_rules.py):
issue 38's items 1, 3, 4, 6, 7 and 9, as the functions the gate and the run's checks call. Each case is
the issue's own: what passed on no evidence must now say why it cannot be judged, or refuse."""

from __future__ import annotations

import math

import pytest
from specdec_eval.evals.lossless.baseline_rules import (
    endpoint_baseline_mode_problem,
    endpoint_job_problem,
    endpoint_pair_problem,
    recorded_baseline_problem,
)
from specdec_eval.evals.lossless.evidence import (
    comparable_pairs,
    format_nats,
    judge_divergence,
    request_failed,
    sample_logprobs_problem,
)
from specdec_eval.evals.lossless.margins import divergence_margin
from specdec_eval.results.sample_record import SampleRecord
from specdec_eval.workers.interface import EngineIdentity


def _sample(tokens: list[int], records: list[list] | None, **extra) -> SampleRecord:
    return SampleRecord(task="gsm8k", doc_id=0, output_token_ids=tokens, logprobs=records, **extra)


# --- item 1: NaN / inf never reach a margin ---------------------------------------------------------------------


def test_a_nan_at_the_divergence_is_no_evidence_not_a_near_tie():
    base = _sample([1, 2], [[-0.1, [[1, -0.1], [5, math.nan]]], [-0.2, [[2, -0.2], [7, -3.0]]]])
    other = _sample([1, 7], [[-0.1, [[1, -0.1]]], [-0.3, [[7, -0.3], [2, -1.0]]]])
    rec = divergence_margin(base, other)
    judged = judge_divergence(rec, base.logprobs[1], other.logprobs[1])
    assert judged.margin is not None  # token 1's records are fine: the NaN sits at token 0
    base.logprobs[1][1][1][1] = math.nan  # now at the divergence: margin NaN, neither near-tie nor beyond
    rec = divergence_margin(base, other)
    assert not (rec["judged"] <= 1.0) and not (rec["judged"] > 1.0)  # the hole: both comparisons false
    judged = judge_divergence(rec, base.logprobs[1], other.logprobs[1])
    assert (
        judged.margin is None
        and judged.problem == "the baseline's logprobs at token 1: an alternative's logprob is NaN"
    )
    assert sample_logprobs_problem(base) == "token 0: an alternative's logprob is NaN"
    assert sample_logprobs_problem(_sample([1], None)) is None  # none at all: the gate's "no logprobs"


# --- item 3: no alternatives is no evidence of a near-tie ----------------------------------------------------------


def test_a_baseline_without_alternatives_is_judged_by_the_other_sides_exact_view():
    base = _sample([4], [[-0.01, []]])  # emitted 4, said nothing about any other token
    other = _sample([9], [[-0.002, [[9, -0.002], [4, -5.952]]]])  # its own logits put 4 5.95 nats down
    rec = divergence_margin(base, other)
    assert rec["margin"] == 0 and rec["lower_bound"]  # the old gate's "possible near-tie" on no evidence
    judged = judge_divergence(rec, base.logprobs[0], other.logprobs[0])
    assert judged.margin == pytest.approx(5.95) and judged.from_reverse  # beyond any plausible noise bound
    own_only = _sample([4], [[-0.01, [[4, -0.01]]]])  # its own token alone names no alternative either
    rec = divergence_margin(own_only, other)
    assert judge_divergence(rec, own_only.logprobs[0], other.logprobs[0]).from_reverse
    silent = _sample([9], [[-0.002, []]])
    rec = divergence_margin(base, silent)
    judged = judge_divergence(rec, base.logprobs[0], silent.logprobs[0])
    assert judged.margin is None and "returned no alternatives at token 0" in judged.problem


def test_a_real_lower_bound_and_an_exact_margin_are_kept():
    base = _sample([4], [[-0.1, [[4, -0.1], [6, -2.0]]]])  # 9 not in its top 2: margin >= 1.9
    other = _sample([9], [[-0.2, [[9, -0.2], [4, -0.25]]]])
    rec = divergence_margin(base, other)
    assert judge_divergence(rec, base.logprobs[0], other.logprobs[0]).margin == pytest.approx(1.9)


# --- item 9: failed requests are not divergences; numbers in reasons ----------------------------------------------


def test_failed_requests_are_set_apart_from_divergences():
    ok = _sample([1], [[-0.1, []]])
    failed = _sample([], None).replace(doc_id=3, error="HTTP 500", finish_reason="error")
    missing = _sample([], None).replace(doc_id=4, finish_reason="missing")
    assert request_failed(failed) and request_failed(missing) and not request_failed(ok)
    kept, lost = comparable_pairs([(ok, ok), (failed, ok), (ok, missing)])
    assert kept == [(ok, ok)] and lost == [3, 0]


@pytest.mark.parametrize(
    "x, shown",
    [(2e-05, "2e-05"), (0.0, "0"), (5.9521, "5.952"), (math.inf, "unknown"), (math.nan, "unknown"), (None, "unknown")],
)
def test_nats_keep_their_significant_digits(x, shown):
    assert format_nats(x) == shown


# --- items 4, 6, 7, 9: what may be a baseline --------------------------------------------------------------------


def test_a_server_is_never_its_own_baseline():
    assert "reach the same server (http://127.0.0.1:8000)" in endpoint_pair_problem(
        "http://127.0.0.1:8000", "http://localhost:8000/v1/"
    )
    assert endpoint_pair_problem("http://127.0.0.1:8000", "http://127.0.0.1:8001") is None


def _identity(kind: str, model: str) -> EngineIdentity:
    return EngineIdentity(kind, model, "eagle3", 3, None, "auto", None, 1, 1, {})


def _manifest(kind: str, model: str, **engine_config) -> dict:
    return {"engine": {"kind": kind, "model": model}, "config": {"engine": engine_config, "eval": {}}}


@pytest.mark.parametrize(
    "manifest, identity, words",
    [
        (
            _manifest("endpoint", "smollm2-q4"),
            _identity("local", "tiny"),
            "was decoded by a server (endpoint), this run by our engine (local)",
        ),
        (
            _manifest("local", "tiny"),
            _identity("endpoint", "tiny"),
            "was decoded by our engine (local), this run by a server (endpoint)",
        ),
        (_manifest("endpoint", "m1"), _identity("endpoint", "m2"), "is of model 'm1', this run of 'm2'"),
        (
            _manifest("local", "tiny", noise_control={"max_batch_size": 1}),
            _identity("local", "tiny"),
            "is a noise-floor control (the plain side at {'max_batch_size': 1})",
        ),
    ],
    ids=["server-for-ours", "ours-for-a-server", "another-served-model", "the-control"],
)
def test_a_recorded_baseline_of_another_engine_model_or_the_control_is_refused(manifest, identity, words):
    problem = recorded_baseline_problem("run R", manifest, identity)
    assert problem.startswith("run R ") and words in problem


def test_a_recorded_plain_run_of_the_same_engine_and_model_is_accepted():
    assert recorded_baseline_problem("run R", _manifest("torchrun", "tiny"), _identity("local", "tiny")) is None
    assert recorded_baseline_problem("run R", _manifest("endpoint", "m"), _identity("endpoint", "m")) is None


def test_an_endpoint_run_says_what_it_cannot_do():
    assert "only our engine can do" in endpoint_baseline_mode_problem("paired")
    assert endpoint_baseline_mode_problem("separate") is None and endpoint_baseline_mode_problem("20261205-x") is None
    assert "--gpus 2 starts torchrun ranks of our engine" in endpoint_job_problem(2)
    assert endpoint_job_problem(1) is None
