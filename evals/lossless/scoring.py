"""The sampled lossless verdict inside the run's gate: which runs are judged in distribution, the baseline engine that
scores their outputs, and the judge of one task (an entry of `gate.JUDGES`).

A spec-dec run whose sampler is not our coupled one (`--spec-sampling rejection` / `rejection-q`, or any server: every
real engine verifies by rejection sampling with its own random stream) emits other tokens than its plain baseline at
temperature > 0, correctly. Its sampled tasks are judged in distribution (`sampled`): the plain engine of the same
configuration scores the run's outputs by teacher forcing (`InferenceEngine.score_outputs`: our engine in process,
exact; a server through the completions API's echo + logprobs, conservative) and the randomized PIT tests them. No
decoded baseline is needed for such a task: the run pipeline gives the gate a `Scorer`
instead, which builds the plain engine when the gate first needs it and closes it after."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ...peers.client.scoring_audit import ONE_BACK
from ...results.run_summary import GateResult, Verdict
from ...results.sample_record import SampleRecord
from ...workers.config import MAX_LOGPROBS, SamplingParams
from ...workers.interface import EngineIdentity, InferenceEngine, ScoredOutput, ScoreRequest
from ..run_types import EvalOptions
from .check import EXACT_DTYPES
from .sampled import ALPHA, DEFAULT_TARGET_TOLERANCE, SampledSample, judge_sampled

SCORED_LABEL = "teacher-forced scoring by the plain engine"


class Scorer:
    """The baseline engine that scores a run's outputs: built by `make_engine` when first asked, closed after each
    call (a task's outputs are scored in one call)."""

    def __init__(self, make_engine: Callable[[], InferenceEngine], what: str) -> None:
        self.make_engine = make_engine
        self.what = what  # in words, for the verdict: "our plain engine (in process)", "the baseline server"
        self.how: dict[str, Any] = {}  # how a server took the scoring (as text, its echo's audit), after score()

    def score(self, requests: Sequence[ScoreRequest]) -> tuple[list[ScoredOutput], int]:
        """Each request's scoring and the scorer's vocabulary size."""
        started = time.monotonic()
        print(
            f"lossless: scoring {len(requests)} sampled output(s) on {self.what} (teacher forcing) ...",
            file=sys.stderr,
            flush=True,
        )
        engine = self.make_engine()
        try:
            scored = engine.score_outputs(requests)
            server = getattr(getattr(engine, "identity", None), "server", None) or {}
            self.how = {k: v for k, v in server.items() if k.startswith("scoring_")}  # a server's scoring options
        finally:
            engine.close()
        failed = sum(s.error is not None for s in scored)
        empty = sum(not r.output_token_ids for r in requests)
        print(
            f"lossless: scored {len(scored) - failed - empty} of {len(scored)} in {time.monotonic() - started:.0f} s"
            + (f", {empty} empty" if empty else "")
            + (f" ({failed} could not be: {next(s.error for s in scored if s.error)[:200]})" if failed else ""),
            file=sys.stderr,
            flush=True,
        )
        return scored, len(engine.tokenizer)


def spec_sampling(identity: EngineIdentity) -> str | None:
    """How the engine verifies drafts at temperature > 0: our engine's --spec-sampling, "server" for an endpoint
    (its own sampler, rejection sampling in every real engine); None for a plain engine."""
    if identity.spec is None:
        return None
    if identity.kind == "endpoint":
        return "server"
    return (identity.config.get("spec") or {}).get("sampling") or "coupled"


def judged_in_distribution(identity: EngineIdentity) -> bool:
    """Whether this engine's sampled outputs are judged in distribution (not token for token): a spec-dec engine
    whose sampler does not reproduce the plain run's tokens."""
    return spec_sampling(identity) not in (None, "coupled")


def is_sampled(temperature: float) -> bool:
    return not SamplingParams(temperature=temperature).greedy


def scored_task_names(options: EvalOptions, identity: EngineIdentity) -> list[str]:
    """The tasks of a run judged in distribution: those decoded at temperature > 0 (the task's own, or what
    --gen-kwargs put on top of it) by an engine whose sampler does not reproduce the plain run's tokens."""
    return sampled_task_names(options) if judged_in_distribution(identity) else []


def sampled_task_names(options: EvalOptions) -> list[str]:
    """The run's tasks decoded at temperature > 0: the task's own, or what --gen-kwargs put on top of it."""
    return [t.name for t in options.tasks if is_sampled(options.conditions_for(t).temperature)]


def sampling_of(record: SampleRecord) -> SamplingParams | None:
    """The parameters a sampled record was sampled with (None: a greedy one, or a record of an older version)."""
    s = record.sampling
    if not s:
        return None
    params = SamplingParams(
        temperature=float(s["temperature"]), top_k=int(s.get("top_k") or 0), top_p=float(s.get("top_p") or 1.0)
    )
    return None if params.greedy else params


def judge_scored(
    records: Sequence[SampleRecord], scorer: Scorer | None, dtype: str, *, alpha: float = ALPHA, seed: int = 0
) -> dict[str, Any]:
    """One task's sampled verdict (a gate record: GateResult.from_json reads it). Its sampled records are scored by
    `scorer` and judged by `sampled`; without a scorer, or without a sampled record that can be scored, NO-GATE
    with what to do. Target fidelity is exact in float32/float64 (tolerance DEFAULT_TARGET_TOLERANCE); elsewhere
    the spec-dec and the prefill-shaped logits differ by rounding, so it is reported, not gated."""
    base = {"baseline_kind": "scored", "baseline_label": SCORED_LABEL}
    sampled = [(r, sampling_of(r)) for r in records if not r.failed]
    sampled = [(r, p) for r, p in sampled if p is not None]
    if scorer is None:
        why = (
            "sampled: no plain engine to score the outputs with (a server needs --baseline-endpoint); no lossless "
            "verdict"
        )
        return {**GateResult(Verdict.NO_GATE, why).to_json(), **base}
    if not sampled and any(r.failed for r in records):
        why = f"sampled: every sampled request failed ({sum(r.failed for r in records)}); no lossless verdict"
        return {**GateResult(Verdict.NO_GATE, why).to_json(), **base}
    usable = [(r, p) for r, p in sampled if r.prompt_token_ids]
    if not usable:
        why = (
            "sampled: no sampled output recorded with its prompt (reused by a resumed run, or a run of an older "
            "version); no lossless verdict"
        )
        return {**GateResult(Verdict.NO_GATE, why).to_json(), **base}
    requests = [
        ScoreRequest(tuple(r.prompt_token_ids), tuple(r.output_token_ids or ()), p, MAX_LOGPROBS) for r, p in usable
    ]
    started = time.perf_counter()
    scored, vocab_size = scorer.score(requests)
    elapsed = time.perf_counter() - started
    samples = [
        SampledSample(r.doc_id, list(r.output_token_ids or ()), p, s, _reported(r.logprobs))
        for (r, p), s in zip(usable, scored, strict=True)
    ]
    tolerance = DEFAULT_TARGET_TOLERANCE if dtype in EXACT_DTYPES else float("inf")
    gate = judge_sampled(samples, vocab_size, alpha=alpha, seed=seed, target_tolerance=tolerance)
    record = gate.to_json()
    record.update(base)
    record["scorer"] = scorer.what
    record["scoring_s"] = round(elapsed, 3)
    if scorer.how:
        record["scoring"] = scorer.how
        if (scorer.how.get("scoring_audit") or {}).get("reading") == ONE_BACK:
            record["reason"] += (
                "; the baseline server's echo read one position back (its echo pairs each token with "
                "the next position's distribution: audited against its own generation)"
            )
    if len(usable) < len(sampled):  # a resumed run's reused outputs keep no prompt (`resume`)
        record["no_prompt"] = len(sampled) - len(usable)
        record["reason"] += f"; {record['no_prompt']} sampled output(s) without a recorded prompt left out"
    return record


def _reported(logprobs: Sequence[Any] | None) -> list[list[Any]] | None:
    """The run's own logprobs as `sampled` reads them (per token [logprob, ...]); None when it reported none."""
    if not logprobs:
        return None
    return [list(x) if not isinstance(x, Mapping) else [x.get("logprob")] for x in logprobs]
