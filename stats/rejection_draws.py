"""The direct test of a rejection sampler's own draws, where the run knows its drafts: each verified draft's accept
decision against its accept probability, and each token emitted at a rejection against the residual distribution
it must be drawn from. Pure numpy; no engine, no run.

A draft d with target probability p(d) and draft probability q(d) must be accepted with probability a = min(1,
p(d) / q(d)) (q one-hot: a = p(d)), given everything before; at the first rejection the emitted token must be a draw
from the residual r = norm(max(0, p - q)) (q one-hot: p without d). The output-level tests see both only mixed into
p; here each is tested on its own:

  residual  the randomized PIT of each recovered token in r (ranked by r, highest first), Neyman's smooth test of
            uniformity (stats.pit): a recovered token drawn from p, from q or as r's argmax piles its u up; a token
            of probability 0 in r (the rejected draft emitted again, with one-hot drafts) is a violation outright
  accepts   the accept decisions against their probabilities, z = sum (A - a) / sqrt(sum a (1 - a)) (a martingale
            z, two-sided): an accept test on the wrong numbers
  accepts within requests  each request's own accept z_j, sum z_j^2 against independent decisions: uniforms fixed
            per request (a stream re-seeded at every step) make a request accept too often or too rarely by its own
            draw, each decision still right alone; the null is simulated for the requests' accept probabilities
Each is exact or asymptotically exact under the null; `RejectionDraws` holds their p-values for the gate's
Bonferroni."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import chi2

from .pit import MONTE_CARLO_ABOVE_P, Placement, exact_placement, randomized_pit, smooth_test


@dataclass(frozen=True)
class DraftVerdict:
    """One verified draft: its accept probability, whether it was accepted, and, when rejected, where the token
    emitted in its place falls in the residual distribution (`recovered`; None when accepted)."""

    accept_prob: float
    accepted: bool
    recovered: Placement | None = None


def residual_placement(p: np.ndarray, draft: int, token: int, q: np.ndarray | None = None) -> Placement:
    """The emitted token's place in the residual of p after rejecting `draft` (q: the draft's distribution; None: a
    one-hot draft). Ranked by residual probability, highest first, ties by id. A token of residual probability 0
    is "out": it cannot follow that rejection."""
    p = np.asarray(p, dtype=np.float64)
    rest = p.copy()
    if q is None:
        rest[draft] = 0.0
    else:
        rest = np.clip(rest - np.asarray(q, dtype=np.float64), 0.0, None)
    total = rest.sum()
    if total <= 0:  # the accept probability was 1: no rejection can happen here; the sampler falls back to p
        rest, total = p.copy(), p.sum()
    r = rest / total
    own = float(r[token])
    if own <= 0:
        return Placement("out")
    ids = np.arange(len(r))
    above = float(r[(r > own) | ((r == own) & (ids < token))].sum())
    return exact_placement(own, above, "in", float((r * r).sum()), float((r * r * r).sum()))


def accept_probability(p_draft: float, q_draft: float = 1.0) -> float:
    return 1.0 if q_draft <= 0 else min(1.0, p_draft / q_draft)


@dataclass(frozen=True)
class RejectionDraws:
    """The direct tests' numbers: the residual PIT's smooth test, the accept z over the run, the within-request
    accept statistic, and the recovered tokens outside their residual."""

    rejections: int
    residual_p: float
    residual_components: tuple[float, ...]
    accepts: int
    accept_z: float
    accept_p: float
    within_statistic: float
    within_p: float
    requests: int
    outside_residual: int

    def p_values(self) -> dict[str, float]:
        return {"residual": self.residual_p, "accepts": self.accept_p, "accepts_within": self.within_p}


MIN_ACCEPT_VARIANCE = 1.0  # below it (a handful of uncertain accept decisions) the normal limit is not trusted


def rejection_draws_test(
    per_request: Sequence[Sequence[DraftVerdict]], rngs: Sequence[np.random.Generator]
) -> RejectionDraws:
    """`per_request`: each request's verified drafts in order; `rngs`: one generator per request for the residual
    PIT's own uniforms (seeded per document by the gate, so the verdict is reproducible in any document order)."""
    u, outside = [], 0
    for verdicts, rng in zip(per_request, rngs, strict=True):
        placed = [v.recovered for v in verdicts if v.recovered is not None]
        outside += sum(p.kind == "out" for p in placed)
        u.append(randomized_pit(placed, rng))
    residual = smooth_test(np.concatenate(u) if u else np.zeros(0))
    a = [np.array([v.accept_prob for v in vs], dtype=np.float64) for vs in per_request]
    x = [np.array([float(v.accepted) for v in vs], dtype=np.float64) for vs in per_request]
    variance = math.fsum(float((ai * (1 - ai)).sum()) for ai in a)
    diff = math.fsum(float((xi - ai).sum()) for xi, ai in zip(x, a, strict=True))
    if variance < MIN_ACCEPT_VARIANCE:
        z, p = 0.0, 1.0
    else:
        z = diff / math.sqrt(variance)
        p = math.erfc(abs(z) / math.sqrt(2))
    statistic, within_p, requests = _within_accepts(a, x)
    return RejectionDraws(
        rejections=int(sum(len(ui) for ui in u)) + outside,
        residual_p=residual.p_value,
        residual_components=residual.components,
        accepts=int(sum(len(ai) for ai in a)),
        accept_z=z,
        accept_p=p,
        within_statistic=statistic,
        within_p=within_p,
        requests=requests,
        outside_residual=outside,
    )


MIN_REQUEST_ACCEPT_VARIANCE = 0.5  # a request whose decisions were nearly sure says nothing about its own uniforms
WITHIN_REPLICATES = 20_000


def _within_accepts(a: Sequence[np.ndarray], x: Sequence[np.ndarray]) -> tuple[float, float, int]:
    """Sum over requests of z_j^2, z_j = sum (A - a) / sqrt(sum a (1 - a)) over the request's decisions; its null
    by a scaled chi-square, and where that says under 0.05, by simulation: independent Bernoulli(a) decisions with
    the run's own accept probabilities (seeded by the statistic, as the smooth test's simulation is)."""
    kept = [
        (ai, xi) for ai, xi in zip(a, x, strict=True) if float((ai * (1 - ai)).sum()) >= MIN_REQUEST_ACCEPT_VARIANCE
    ]
    if not kept:
        return 0.0, 1.0, 0
    kept.sort(key=lambda pair: (len(pair[0]), math.fsum(pair[0].tolist())))  # the same order whatever the documents'
    z = [math.fsum((xi - ai).tolist()) / math.sqrt(math.fsum((ai * (1 - ai)).tolist())) for ai, xi in kept]
    statistic = math.fsum(v * v for v in z)
    # E z^4 = 3 + sum a(1-a)(1 - 6a(1-a)) / V^2 for independent Bernoulli: the scaled chi-square's variance
    variance = math.fsum(
        2 + math.fsum((ai * (1 - ai) * (1 - 6 * ai * (1 - ai))).tolist()) / math.fsum((ai * (1 - ai)).tolist()) ** 2
        for ai, _ in kept
    )
    mean = float(len(kept))
    variance = max(variance, 1e-9)
    scale, dof = variance / (2 * mean), 2 * mean * mean / variance
    p = float(chi2.sf(statistic / scale, dof))
    if p < MONTE_CARLO_ABOVE_P:
        p = _within_accepts_monte_carlo(statistic, [ai for ai, _ in kept])
    return statistic, min(1.0, p), len(kept)


def _within_accepts_monte_carlo(statistic: float, a: Sequence[np.ndarray]) -> float:
    flat = np.concatenate(a)
    starts = np.concatenate([[0], np.cumsum([len(ai) for ai in a])[:-1]])
    sd = np.sqrt(np.array([math.fsum((ai * (1 - ai)).tolist()) for ai in a]))
    rng = np.random.default_rng([0xACC, len(a), len(flat), int.from_bytes(np.float64(statistic).tobytes(), "little")])
    exceed, chunk = 0, max(1, 4_000_000 // max(1, len(flat)))
    for done in range(0, WITHIN_REPLICATES, chunk):
        k = min(chunk, WITHIN_REPLICATES - done)
        draws = (rng.random((k, len(flat))) < flat).astype(np.float64) - flat
        z = np.add.reduceat(draws, starts, axis=1) / sd
        exceed += int(((z * z).sum(axis=1) >= statistic).sum())
    return (1 + exceed) / (1 + WITHIN_REPLICATES)
