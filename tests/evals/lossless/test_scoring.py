"""The sampled verdict inside the run's lossless gate (evals/lossless/scoring.py, gate.py's "sampled" judge): which
engines are judged in distribution, the records' prompts and sampling parameters scored by the scorer it is given,
a clean sampler PASSes and a greedy one FAILs, and without a scorer or a prompt the gate says NO-GATE, never PASS."""

from __future__ import annotations

import pytest
import torch
from specdec_eval.evals.lossless.baseline import BaselineKind, BaselineRef, ResolvedBaseline, resolve_baseline
from specdec_eval.evals.lossless.gate import JudgeKind, LosslessCase, evaluate_lossless, judge_kind
from specdec_eval.evals.lossless.scoring import Scorer, judge_scored, judged_in_distribution, spec_sampling
from specdec_eval.evals.run_types import EvalOptions
from specdec_eval.evals.tasks.registry import parse_tasks
from specdec_eval.results.run_summary import Verdict
from specdec_eval.results.sample_record import SampleRecord
from specdec_eval.workers.config import EngineConfig, SamplingParams, SpecConfig
from specdec_eval.workers.engine.engine import identity_of
from specdec_eval.workers.engine.teacher_forcing import view_of_probs
from specdec_eval.workers.interface import ScoredOutput
from specdec_eval.workers.sampling.keyed import target_probs

PARAMS = SamplingParams(temperature=0.7, top_k=50, top_p=0.95)
VOCAB, DOCS, TOKENS = 64, 6, 200


class _FakeEngine:
    """Scores what `truth` says: the exact place of each token in each position's sampling distribution."""

    def __init__(self, truth: dict[tuple[int, ...], list[torch.Tensor]], log: list) -> None:
        self.truth, self.log, self.tokenizer = truth, log, [0] * VOCAB

    def score_outputs(self, requests):
        self.log.append(requests)
        return [
            ScoredOutput(
                [0.0] * len(r.output_token_ids),
                [[] for _ in r.output_token_ids],
                view_of_probs(self.truth[r.prompt_token_ids], list(r.output_token_ids)),
            )
            for r in requests
        ]

    def close(self) -> None:
        self.log.append("closed")


def _run(greedy: bool, seed: int = 0) -> tuple[list[SampleRecord], Scorer, list]:
    """A sampled task's records (prompt i of each document: (i,)) and a scorer that knows their distributions;
    greedy: the emitted tokens are each position's most likely one (a sampler that ignores the temperature)."""
    rng = torch.Generator().manual_seed(seed)
    records, truth, log = [], {}, []
    for doc in range(DOCS):
        logits = torch.randn(TOKENS, VOCAB, generator=rng) * 3
        probs = target_probs(logits, PARAMS)
        drawn = probs.argmax(-1) if greedy else torch.multinomial(probs, 1, generator=rng).squeeze(-1)
        truth[(doc + 1,)] = probs
        records.append(
            SampleRecord(
                "gsm8k_sampled",
                doc,
                output_token_ids=drawn.tolist(),
                prompt_token_ids=[doc + 1],
                sampling={"temperature": 0.7, "top_k": 50, "top_p": 0.95},
            )
        )
    return records, Scorer(lambda: _FakeEngine(truth, log), "a fake engine"), log


def test_a_clean_sampler_passes_and_a_greedy_one_fails_on_the_records_own_prompts_and_parameters():
    records, scorer, log = _run(greedy=False)
    record = judge_scored(records, scorer, "float32")
    assert record["verdict"] == Verdict.PASS, record["reason"]
    assert record["reason"].startswith(f"sampled: {DOCS * TOKENS:,} positions (exact)")
    assert record["baseline_kind"] == "scored" and record["scorer"] == "a fake engine" and record["scoring_s"] >= 0
    (requests, closed) = log
    assert closed == "closed" and [r.prompt_token_ids for r in requests] == [(d + 1,) for d in range(DOCS)]
    assert {(r.sampling.temperature, r.sampling.top_k, r.sampling.top_p) for r in requests} == {(0.7, 50, 0.95)}
    greedy, scorer, _ = _run(greedy=True)
    failed = judge_scored(greedy, scorer, "float32")
    assert failed["verdict"] == Verdict.FAIL and "not draws from the target's sampling distribution" in failed["reason"]


def test_without_a_scorer_or_a_recorded_prompt_the_verdict_is_no_gate():
    records, scorer, log = _run(greedy=False)
    assert judge_scored(records, None, "float32")["verdict"] == Verdict.NO_GATE
    old = [r.replace(prompt_token_ids=None) for r in records]  # a run of a version that did not record them
    assert judge_scored(old, scorer, "float32")["verdict"] == Verdict.NO_GATE and log == []
    resumed = judge_scored([old[0], *records[1:]], scorer, "float32")  # a resumed run's reused output has none
    assert resumed["no_prompt"] == 1 and "1 sampled output(s) without a recorded prompt left out" in resumed["reason"]
    lost = [r.replace(output_token_ids=[], error="HTTP 500", finish_reason="error") for r in records]
    dead = judge_scored(lost, scorer, "float32")  # a server whose engine died on every sampled request
    assert dead["verdict"] == Verdict.NO_GATE and f"every sampled request failed ({DOCS})" in dead["reason"]


ENGINE = EngineConfig(model="tiny", spec=SpecConfig())


@pytest.mark.parametrize(("sampling", "judged"), [("coupled", False), ("rejection", True), ("rejection-q", True)])
def test_a_sampler_that_does_not_reproduce_the_plain_tokens_is_judged_in_distribution(sampling, judged):
    from dataclasses import replace

    identity = identity_of(replace(ENGINE, spec=SpecConfig(sampling=sampling)))
    assert spec_sampling(identity) == sampling and judged_in_distribution(identity) is judged
    assert not judged_in_distribution(identity_of(EngineConfig(model="tiny")))
    assert judged_in_distribution(replace(identity, kind="endpoint"))  # a server's sampler is its own


def test_the_gate_picks_the_sampled_judge_for_a_sampled_task_only_and_needs_no_decoded_baseline(tmp_path):
    from dataclasses import replace

    records, scorer, _ = _run(greedy=False)
    greedy_record = SampleRecord("gsm8k", 0, output_token_ids=[1, 2])
    scored = ResolvedBaseline(BaselineKind.SCORED, scorer=scorer, missing=f"no finished baseline run under {tmp_path}")
    case = LosslessCase("gsm8k_sampled", records, scored, "float32", None, True)
    assert judge_kind(case) == JudgeKind.IN_DISTRIBUTION
    # our coupled sampler: judged both ways when a scorer is there, by identity alone without one
    assert judge_kind(replace(case, in_distribution=False)) == JudgeKind.IDENTITY_AND_DISTRIBUTION
    unscored = replace(case, in_distribution=False, baseline=replace(scored, scorer=None))
    assert judge_kind(unscored) == JudgeKind.TOKEN_IDENTITY
    assert judge_kind(replace(case, task="gsm8k", samples=[greedy_record])) == JudgeKind.TOKEN_IDENTITY
    identity = identity_of(replace(ENGINE, spec=SpecConfig(sampling="rejection")))
    options = EvalOptions(tasks=parse_tasks("gsm8k_sampled"))
    resolved = resolve_baseline(BaselineRef(None, BaselineKind.SCORED, scorer=scorer), identity, str(tmp_path), options)
    assert resolved == scored  # nothing decoded, nothing looked up
    gates, record = evaluate_lossless(["gsm8k_sampled"], records, identity, [], resolved)
    assert gates["gsm8k_sampled"].verdict == Verdict.PASS and record["kind"] == "scored"
    # the same run with nothing to score with: NO-GATE, and a greedy task beside it still looks for its baseline
    gates, _ = evaluate_lossless(
        ["gsm8k", "gsm8k_sampled"],
        [greedy_record, *records],
        identity,
        [],
        replace(scored, scorer=None),
    )
    assert gates["gsm8k_sampled"].verdict == Verdict.NO_GATE and gates["gsm8k"].verdict == Verdict.NO_BASELINE
