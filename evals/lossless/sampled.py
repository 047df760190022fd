"""The sampled lossless gate: is a spec-dec run at temperature > 0 lossless in distribution?

At T > 0 an engine that verifies drafts by rejection sampling with its own random stream (vLLM, SGLang,
TensorRT-LLM, our `--spec-sampling rejection`) emits other tokens than a plain run of the same seed, correctly; only
the distribution is preserved. So the baseline engine decodes nothing: it scores the spec-dec run's outputs by
teacher forcing (`InferenceEngine.score_outputs`, one prefill-shaped pass per output), and two checks judge them:

1. Sampler fidelity: the emitted tokens are draws from the target's sampling distribution (temperature, top-k,
   top-p) at each position. Every sampled position of the run is tested at once by the randomized PIT (stats.pit),
   i.i.d. U(0, 1) under the null, with Neyman's smooth test, and by the likelihood test (the emitted tokens'
   probabilities against their expectation: the sharper one where a sampler over- or under-draws the likely tokens),
   and within each request (draws each right alone but dependent inside a request: a stream restarted per step),
   plain and weighted by the likelihood's scale of each position; where the run knows its drafts (`drafts` of a
   sample), the rejection sampler's own draws directly (`stats.rejection_draws`: the accept decisions, over the run
   and within each request, and the tokens emitted at rejections against the residual); Bonferroni over the tests
   at `alpha`; and any token outside the sampling support by more than the logit noise (a
   top-k / top-p violation) FAILs outright. Exact where the baseline had the whole
   distribution (our engine, in process); conservative where it returned only the top logprobs (an endpoint),
   which the verdict says.
2. Target fidelity: where the spec-dec run reported its own logprobs, they agree with the baseline's scoring of the
   same tokens within `target_tolerance` nats (a spec path that corrupts the target's forward shows here at any
   temperature).

The verdict names its basis, e.g. "sampled: 2,431 positions (exact), PIT uniformity p = 0.43, no support violation;
target logprobs within 0.0002 nats of the baseline's scoring", and its record holds the PIT histogram's counts (the
report plots them). `judge_outputs` is what the run pipeline calls; `judge_sampled` judges scored samples already in
hand. Nothing here imports the pipeline."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...results.run_summary import FAIL, NO_GATE, PASS, GateResult
from ...stats.pit import (
    Placement,
    exact_placement,
    histogram,
    likelihood_test,
    likelihood_weights,
    randomized_pit,
    smooth_test,
    tail_test,
    topk_placement,
    within_request_test,
)
from ...stats.rejection_draws import DraftVerdict, rejection_draws_test
from ...workers.config import MAX_LOGPROBS, SamplingParams
from ...workers.engine.teacher_forcing import DEFAULT_SUPPORT_NOISE
from ...workers.interface import GenerationOutput, InferenceEngine, ScoredOutput, ScoreRequest
from .sampled_text import basis_line, direction, draws_failures, draws_numbers, within_numbers

ALPHA = 0.01
# Float32: the spec-dec engine's decode-shaped logits and the baseline's prefill-shaped ones differ by ~1e-5 nats
# (measured: the lossless_sampled study's --scoring-cost prints the largest difference); in bf16 pass the noise the
# control measured.
DEFAULT_TARGET_TOLERANCE = 1e-3
PIT_BINS = 20
SHOWN_VIOLATIONS = 10


@dataclass(frozen=True)
class SampledSample:
    """One spec-dec output and its baseline's scoring. `reported`: the spec-dec engine's own logprobs of the output
    (GenerationOutput.logprobs: per token [logprob, alternatives, ...]), None when it reported none."""

    doc_id: Any
    token_ids: Sequence[int]
    sampling: SamplingParams
    scored: ScoredOutput
    reported: Sequence[Sequence[Any]] | None = None
    # where the run knows its drafts: each verified draft's accept probability and decision and, at a rejection,
    # the emitted token's place in the residual (`stats.rejection_draws`); None where unknown
    drafts: Sequence[DraftVerdict] | None = None


def score_requests(outputs: Sequence[GenerationOutput], sampling: Sequence[SamplingParams]) -> list[ScoreRequest]:
    """What the baseline scores: each output after its own prompt, with the parameters it was sampled with."""
    return [
        ScoreRequest(tuple(o.prompt_token_ids), tuple(o.token_ids), s, MAX_LOGPROBS)
        for o, s in zip(outputs, sampling, strict=True)
    ]


def judge_outputs(
    outputs: Sequence[GenerationOutput],
    sampling: Sequence[SamplingParams],
    doc_ids: Sequence[Any],
    baseline: InferenceEngine,
    *,
    alpha: float = ALPHA,
    seed: int = 0,
    support_noise: float = DEFAULT_SUPPORT_NOISE,
    target_tolerance: float = DEFAULT_TARGET_TOLERANCE,
) -> GateResult:
    """The gate on a spec-dec run's outputs (finished ones; a failed request is no sample), the baseline scoring
    them: one `score_outputs` call, then `judge_sampled`."""
    kept = [i for i, o in enumerate(outputs) if o.finish_reason != "error"]
    scored = baseline.score_outputs(score_requests([outputs[i] for i in kept], [sampling[i] for i in kept]))
    samples = [
        SampledSample(doc_ids[i], outputs[i].token_ids, sampling[i], s, outputs[i].logprobs)
        for i, s in zip(kept, scored, strict=True)
    ]
    return judge_sampled(
        samples,
        len(baseline.tokenizer),
        alpha=alpha,
        seed=seed,
        support_noise=support_noise,
        target_tolerance=target_tolerance,
    )


def judge_sampled(
    samples: Sequence[SampledSample],
    vocab_size: int,
    *,
    alpha: float = ALPHA,
    seed: int = 0,
    support_noise: float = DEFAULT_SUPPORT_NOISE,
    target_tolerance: float = DEFAULT_TARGET_TOLERANCE,
) -> GateResult:
    """PASS, FAIL, or NO-GATE (nothing sampled was scored), with its basis and the numbers it rests on."""
    fidelity = _Fidelity()
    target = _Target(target_tolerance)
    errors = []
    reasons: dict[str, list] = {}  # why outputs could not be scored: the reason -> its documents
    for sample in samples:
        if sample.sampling.greedy:
            continue
        problem = score_problem(sample)
        if problem is not None:
            errors.append(sample.doc_id)
            reasons.setdefault(problem, []).append(sample.doc_id)
            continue
        placements = place(sample, vocab_size, support_noise)
        fidelity.add(sample.doc_id, sample.token_ids, placements, _doc_rng(seed, sample.doc_id))
        if sample.drafts is not None:
            fidelity.drafts.append((sample.doc_id, list(sample.drafts), _doc_rng(seed, sample.doc_id, "drafts")))
        if sample.reported is not None:
            target.add(sample.doc_id, sample.reported, sample.scored.logprobs)
    return _verdict(fidelity, target, errors, alpha, reasons)


def score_problem(sample: SampledSample) -> str | None:
    """Why a sample's scoring is no evidence about its output: the scorer's error, another number of tokens, or
    other tokens than the output's (a scorer that names tokens must name the output's own: a server or proxy that
    echoes others scored another output)."""
    scored = sample.scored
    if scored.error is not None:
        return scored.error
    if len(scored.logprobs) != len(sample.token_ids):
        return "scored another number of tokens than the output's"
    wrong = scored.other_tokens(sample.token_ids)
    if wrong is not None:
        return f"scored other tokens than the output's (from output token {wrong})"
    return None


def place(sample: SampledSample, vocab_size: int, support_noise: float) -> list[Placement]:
    """Each output token's placement: from the exact view when the baseline had it, else from the top logprobs."""
    scored, params = sample.scored, sample.sampling
    if scored.sampled is not None:
        return [exact_placement(s.prob, s.mass_above, s.support, s.sum_p2, s.sum_p3) for s in scored.sampled]
    keys = scored.token_keys if scored.token_keys is not None else list(sample.token_ids)
    unreadable = set(scored.unreadable)  # top logprobs that are not a top K: no placement rests on them
    rows = enumerate(zip(scored.logprobs, keys, scored.top_logprobs, strict=True))
    return [
        Placement("unknown")
        if i in unreadable
        else topk_placement(lp, key, top, params.temperature, params.top_k, params.top_p, vocab_size, support_noise)
        for i, (lp, key, top) in rows
    ]


def _doc_rng(seed: int, doc_id: Any, use: str = "") -> np.random.Generator:
    """The PIT's own uniforms for one document: seeded by the gate's seed and the document, so a verdict is
    reproducible and does not depend on the order documents come in (`use`: another stream of the same document,
    the residual PIT's)."""
    digest = hashlib.blake2b(repr(doc_id).encode(), digest_size=8).digest()
    key = [seed, int.from_bytes(digest, "little")]
    if use:
        key.append(int.from_bytes(hashlib.blake2b(use.encode(), digest_size=4).digest(), "little"))
    return np.random.default_rng(key)


class _Fidelity:
    """Sampler fidelity over the whole run."""

    def __init__(self) -> None:
        self.u: list[np.ndarray] = []  # per document, in the order they were added
        self.weights: list[np.ndarray] = []  # each u's weight in the weighted within-request test
        self.drafts: list[tuple[Any, list[DraftVerdict], np.random.Generator]] = []  # where the drafts are known
        self.doc_ids: list[Any] = []
        self.kinds: dict[str, int] = {"exact": 0, "conditional": 0, "edge": 0, "tail": 0, "out": 0, "unknown": 0}
        self.violations: list[dict[str, Any]] = []
        self.tail_bounds: list[float] = []
        self.placed: list[Placement] = []
        self.documents = 0

    def add(self, doc_id: Any, tokens: Sequence[int], placements: list[Placement], rng: np.random.Generator) -> None:
        self.documents += 1
        self.u.append(randomized_pit(placements, rng))
        self.weights.append(likelihood_weights(placements))
        self.doc_ids.append(doc_id)
        self.placed.extend(placements)
        for position, (token, p) in enumerate(zip(tokens, placements, strict=True)):
            self.kinds[p.kind] += 1
            if p.kind == "out":
                self.violations.append({"doc_id": doc_id, "position": position, "token": int(token)})
            if p.tail_bound > 0:
                self.tail_bounds.append(p.tail_bound)

    @property
    def pit(self) -> np.ndarray:
        return np.concatenate(self.u) if self.u else np.zeros(0)


class _Target:
    """Target fidelity: the spec-dec engine's reported logprobs against the baseline's scoring."""

    def __init__(self, tolerance: float) -> None:
        self.tolerance = tolerance
        self.tokens = 0
        self.max_diff = 0.0
        self.beyond: list[dict[str, Any]] = []

    def add(self, doc_id: Any, reported: Sequence[Sequence[Any]], scored: Sequence[float]) -> None:
        for position, (record, lp) in enumerate(zip(reported, scored, strict=False)):
            if math.isnan(float(lp)):  # the scorer knows only that the token is below its top logprobs
                continue
            diff = abs(float(record[0]) - float(lp))
            self.tokens += 1
            self.max_diff = max(self.max_diff, diff)
            if diff > self.tolerance:
                self.beyond.append({"doc_id": doc_id, "position": position, "diff": round(diff, 5)})


def _verdict(
    fidelity: _Fidelity, target: _Target, errors: list, alpha: float, reasons: dict[str, list] | None = None
) -> GateResult:
    u = fidelity.pit
    kinds = fidelity.kinds
    if not fidelity.documents or not len(u):
        why = "no sampled output was scored" + (
            f" ({len(errors)} could not be{_first_reason(reasons)})" if errors else ""
        )
        return GateResult(
            NO_GATE, f"sampled: {why}", {"documents": fidelity.documents, "score_errors": errors, **_reasons(reasons)}
        )
    uniformity = smooth_test(u)
    likelihood = likelihood_test(fidelity.placed)
    within = within_request_test(fidelity.u)
    weighted = within_request_test(fidelity.u, fidelity.weights)
    tests = {
        "pit": uniformity.p_value,
        "likelihood": likelihood.p_value,
        "within_requests": within.p_value,
        "within_requests_weighted": weighted.p_value,
    }
    draws = None
    if fidelity.drafts:
        draws = rejection_draws_test([d for _, d, _ in fidelity.drafts], [rng for _, _, rng in fidelity.drafts])
        tests.update(draws.p_values())
    tail = None
    if fidelity.tail_bounds:
        expected = math.fsum(fidelity.tail_bounds)
        tail = {
            "observed": kinds["tail"],
            "expected_at_most": round(expected, 3),
            "p": tail_test(fidelity.tail_bounds, kinds["tail"]),
        }
        tests["tail"] = tail["p"]
    level = alpha / len(tests)  # Bonferroni over the statistical tests
    exact = kinds["conditional"] == 0 and kinds["tail"] == 0
    numbers: dict[str, Any] = {
        "basis": "exact" if exact else "conservative",
        "alpha": alpha,
        "level": level,  # each test's, Bonferroni over them
        "positions": int(len(u)),
        "placements": dict(kinds),
        "documents": fidelity.documents,
        "pit": {
            "test": "Neyman smooth, 4 components",
            "statistic": round(uniformity.statistic, 4),
            "p": uniformity.p_value,
            "components": [round(c, 3) for c in uniformity.components],
        },
        "likelihood": {
            "test": "emitted tokens' sampling probabilities against their expectation (z > 0: likely tokens "
            "over-drawn)",
            "z": round(likelihood.z, 3),
            "p": likelihood.p_value,
            "observed": round(likelihood.observed, 3),
            "expected": round(likelihood.expected, 3),
            "sd": round(likelihood.sd, 3),
            "positions": likelihood.n,
        },
        "within_requests": within_numbers(within, fidelity),
        "within_requests_weighted": {
            "test": "per-request PIT means, each position weighted by the sd of its token's probability (the "
            "likelihood's scale: near-sure positions do not count), against independent draws",
            "statistic": round(weighted.statistic, 4),
            "p": weighted.p_value,
            "z": round(weighted.z, 3),
            "requests": weighted.requests,
        },
        "pit_histogram": histogram(u, PIT_BINS),
        "num_violations": len(fidelity.violations),
        "violations": fidelity.violations[:SHOWN_VIOLATIONS],
    }
    if tail is not None:
        numbers["tail_test"] = tail
    if draws is not None:
        numbers["rejection_draws"] = draws_numbers(draws)
    if target.tokens:
        numbers["target"] = {
            "tokens": target.tokens,
            "max_abs_diff": round(target.max_diff, 6),
            "tolerance": target.tolerance,
            "num_beyond": len(target.beyond),
            "beyond": target.beyond[:SHOWN_VIOLATIONS],
        }
    if errors:
        numbers["score_errors"] = errors
        numbers.update(_reasons(reasons))
    failures = []
    if fidelity.violations:
        first = fidelity.violations[0]
        failures.append(
            f"{len(fidelity.violations)} token(s) outside the sampling support (top-k / top-p), the first "
            f"at doc {first['doc_id']} position {first['position']}"
        )
    output_tests = ("pit", "likelihood", "tail")
    if min(p for test, p in tests.items() if test in output_tests) < level:
        failures.append(
            "the emitted tokens are not draws from the target's sampling distribution" + direction(likelihood, level)
        )
    if within.p_value < level:
        off = numbers["within_requests"]["most_off"]
        failures.append(
            f"the draws within a request are not independent: the requests' PIT means spread "
            f"{within.statistic / within.requests:.2f} x as far as independent draws' (most off: doc "
            f"{off['doc_id']}, mean u {off['mean_u']:.3f} over {off['positions']} positions)"
        )
    if weighted.p_value < level:
        failures.append(
            f"the draws within a request are not independent: weighted by how much each position's token "
            f"probability can vary, the requests' PIT means spread {weighted.statistic / weighted.requests:.2f} x as "
            f"far as independent draws'"
        )
    if draws is not None:
        failures.extend(draws_failures(draws, level))
    if target.beyond:
        first = target.beyond[0]
        failures.append(
            f"{len(target.beyond)} reported logprob(s) off the baseline's scoring by more than "
            f"{target.tolerance:g} nats (first: doc {first['doc_id']} position {first['position']}, "
            f"{first['diff']:g})"
        )
    basis = basis_line(
        u, kinds, uniformity.p_value, likelihood, (within, weighted), tail, draws, fidelity, target, level
    )
    reason = f"{basis}: " + "; ".join(failures) if failures else basis
    return GateResult(FAIL if failures else PASS, reason, numbers)


def _first_reason(reasons: dict[str, list] | None) -> str:
    """The most common reason outputs could not be scored, as the verdict quotes it (the server's own message)."""
    if not reasons:
        return ""
    reason, docs = max(reasons.items(), key=lambda item: len(item[1]))
    return f"; {len(docs)} of them: {reason[:300]}"


def _reasons(reasons: dict[str, list] | None) -> dict[str, Any]:
    """Each reason outputs could not be scored, with its documents (the first few reasons only)."""
    if not reasons:
        return {}
    return {"score_error_reasons": [{"reason": r[:500], "doc_ids": docs} for r, docs in list(reasons.items())[:5]]}
