"""The rejection sampler checked on its own: on small hand-made distributions, the tokens
one verify step emits follow the target's sampling distribution p at every position, by a chi-square goodness-of-fit
test; each planted rule of the sampled classes is the negative control that must fail it where it applies.

A case is one verify step: K + 1 rows of logits, fixed whatever came before (a model: the rows of a real step depend
on the drafts before them), and the drafts (fixed one-hot drafts, or drawn from q per trial for `rejection-q`).
Position j's token is observed in the trials that accepted drafts 1..j, where it must be distributed as p_j.

`python -m specdec_eval.studies.lossless_sampled sampler` prints the table."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import torch
from scipy.stats import chi2

from ..workers.config import SamplingParams
from ..workers.planted.rejection import CORRECT, RejectionRule, ruled_rejection_verify
from ..workers.sampling.keyed import target_probs
from ..workers.sampling.rejection import request_stream, sample_from

MIN_EXPECTED = 5.0  # chi-square bins with fewer expected counts are pooled into one


def _logits(*probs: float) -> list[float]:
    return [math.log(p) for p in probs]


@dataclass(frozen=True)
class Case:
    name: str
    logits: tuple[tuple[float, ...], ...]  # [K + 1, V]
    drafts: tuple[int, ...]  # one-hot drafts (ignored when draft_probs is set: drawn from q then)
    params: SamplingParams
    draft_probs: tuple[tuple[float, ...], ...] | None = None  # [K, V]: q of each draft position


_ROWS = (
    tuple(_logits(0.40, 0.25, 0.15, 0.10, 0.06, 0.04)),
    tuple(_logits(0.10, 0.45, 0.20, 0.15, 0.06, 0.04)),
    tuple(_logits(0.30, 0.10, 0.10, 0.30, 0.15, 0.05)),
)
CASES = (
    Case("one-hot, T=1", _ROWS, (0, 1), SamplingParams(temperature=1.0)),
    Case("one-hot, T=0.7 top-k 4 top-p 0.8", _ROWS, (0, 2), SamplingParams(temperature=0.7, top_k=4, top_p=0.8)),
    # top-k 2 then top-p 0.5 keeps token 0 only; top-p 0.5 of the whole then top-k 2 keeps tokens 0 and 1
    Case(
        "one-hot, top-k 2 top-p 0.5",
        (tuple(_logits(0.35, 0.30, 0.20, 0.15)),) * 3,
        (0, 1),
        SamplingParams(temperature=1.0, top_k=2, top_p=0.5),
    ),
    Case(
        "q drafts, T=1",
        _ROWS,
        (0, 0),
        SamplingParams(temperature=1.0),
        ((0.5, 0.1, 0.1, 0.1, 0.1, 0.1), (0.2, 0.2, 0.2, 0.2, 0.1, 0.1)),
    ),
)


@dataclass(frozen=True)
class ChiSquare:
    position: int
    n: int  # trials that reached the position
    statistic: float
    df: int
    p_value: float


def position_counts(case: Case, rule: RejectionRule, trials: int, seed: int) -> list[Counter]:
    """Per position of the step, the tokens emitted there, over `trials` independent verify steps."""
    logits = torch.tensor(case.logits, dtype=torch.float32)
    stream = request_stream(seed)
    q = torch.tensor(case.draft_probs, dtype=torch.float32) if case.draft_probs is not None else None
    counts = [Counter() for _ in range(len(case.logits))]
    for _ in range(trials):
        drafts = list(case.drafts) if q is None else [sample_from(row, stream) for row in q]
        emitted = ruled_rejection_verify(logits, drafts, case.params, stream, q, rule)
        for j, token in enumerate(emitted):
            counts[j][token] += 1
    return counts


def chi_square_check(case: Case, rule: RejectionRule = CORRECT, trials: int = 20_000, seed: int = 0) -> list[ChiSquare]:
    """Goodness of fit of each position's tokens to p_j (target_probs, the plain sampler's function). A token the
    plain sampler never draws (outside the support) makes its position's statistic infinite."""
    out = []
    for j, counts in enumerate(position_counts(case, rule, trials, seed)):
        n = sum(counts.values())
        if n == 0:
            continue
        p = target_probs(torch.tensor(case.logits[j], dtype=torch.float32), case.params).double().tolist()
        if any(p[t] == 0 for t in counts):
            out.append(ChiSquare(j, n, math.inf, 0, 0.0))
            continue
        bins, pooled_observed, pooled_expected = [], 0, 0.0
        for token, prob in enumerate(p):
            if prob == 0:
                continue
            if n * prob < MIN_EXPECTED:
                pooled_observed, pooled_expected = pooled_observed + counts[token], pooled_expected + n * prob
            else:
                bins.append((counts[token], n * prob))
        if pooled_expected:
            bins.append((pooled_observed, pooled_expected))
        statistic = sum((o - e) ** 2 / e for o, e in bins)
        df = len(bins) - 1
        out.append(ChiSquare(j, n, statistic, df, float(chi2.sf(statistic, df)) if df else 1.0))
    return out
