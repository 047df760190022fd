"""The statistics of the sampled lossless gate: where each emitted token falls in the target's sampling
distribution at its position, the randomized probability integral transform (PIT) of it, and the tests on all of
them at once. Pure numpy; no engine, no run.

Randomized PIT. Rank the vocabulary at a position by sampling probability (highest first, ties by id); a token x
with probability p(x) and mass m(x) ranked above it gets u = m(x) + V * p(x), V ~ U(0, 1) drawn by the gate. If x
was drawn from p, u is exactly U(0, 1) given everything before the position, so the u of a whole run are i.i.d.
U(0, 1) although its positions depend on each other (each is uniform conditionally on its past). Ranking by
probability puts the likely tokens at small u: a verifier that favours them (greedy, a draft left in the residual)
piles u up near 0; one that flattens p (a wrong temperature) moves u up.

Where only the top K raw logprobs are known (an endpoint's scoring), a position is `placed` conditionally: on the
set S of tokens surely in the support (its members' relative sampling probabilities are exp(logprob / T), known
without the normaliser), u is the PIT of x within S, given x in S: still U(0, 1) given the past, but blind to how
often the tokens outside S were drawn. Those draws are counted against an upper bound of their probability (the
`tail test`). Exact, unconditional positions are those whose support is known: our engine's view, temperature 1
without top-k / top-p (the tail is one category of known mass), or a support inside the top K.

Likelihood: the probability p(x) of each emitted token against what a draw from p gives, E[p(x)] = sum p^2 with
variance sum p^3 - (sum p^2)^2 (conditional on the past, so the standardised sum over the run is N(0, 1) under the
null by the martingale central limit theorem). Positions where one token holds nearly all the mass add nothing to
it, where the PIT's uniforms there still add noise: it is the sharper test of a sampler that favours the likely
tokens (z > 0: a draft left in the residual, a greedy verifier, a filter too tight) or flattens p (z < 0: an accept
test at the wrong temperature or on the wrong row). Conditional placements use the distribution within S; the
lumped tail at temperature 1 is one category of known mass.

Uniformity: Neyman's smooth test with the first four Legendre components (mean, spread, skew and tails of u).
Each component's normalised sum is asymptotically N(0, 1) and the four are independent under the null, so the
statistic is chi-square with 4 degrees of freedom; below 2,000 positions its tail is a little liberal (300
positions: 0.0057 below 0.005), so there a p-value under 0.05 is taken from a seeded simulation of the exact null
instead (u i.i.d. U(0, 1): it depends on n alone). It is chosen over Kolmogorov-Smirnov because the bug classes
move u smoothly (location and spread) rather than in one narrow place, where a smooth test is the most powerful,
and because the signs of the components say which way a sampler is off (`components[0] < 0`: too many likely
tokens). The seeded simulation (the lossless_sampled study) measures its false-FAIL rate at the gate's alpha.

Within requests: u i.i.d. over the run means i.i.d. within each request too, which the tests on all u at once do not
look at; `within_request_test` compares the spread of the requests' own PIT means with independent draws'."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import chi2

SMOOTH_ORDER = 4


@dataclass(frozen=True)
class Placement:
    """One emitted token's place in its sampling distribution. kind:
    "exact"        u = lo + V * width is the PIT over the whole distribution
    "conditional"  the same within the tokens surely in the support (only top logprobs known)
    "edge"         outside the support, or unsure whether inside, by less than the logit noise: left out
    "out"          outside the support (top-k / top-p) by more than the noise: a violation
    "tail"         below the known top logprobs, where the support may reach: left out of the PIT, counted
    "unknown"      the scorer's top logprobs there are not a top K (tokens that print alike merged): left out
    tail_bound: an upper bound of the probability that a token below the known top logprobs is drawn here (0 where
    the whole distribution is known or the support ends within the top)."""

    kind: str
    lo: float = 0.0
    width: float = 0.0
    tail_bound: float = 0.0
    # sum of p^2 and p^3 over the distribution the PIT places the token in (None: unknown, left out of the
    # likelihood test); `width` is the token's own probability in it
    sum_p2: float | None = None
    sum_p3: float | None = None

    @property
    def in_pit(self) -> bool:
        return self.kind in ("exact", "conditional")


def exact_placement(
    prob: float, mass_above: float, support: str, sum_p2: float | None = None, sum_p3: float | None = None
) -> Placement:
    """From our engine's exact view (`SampledPosition`)."""
    if support == "out":
        return Placement("out")
    if support != "in" or prob <= 0:
        return Placement("edge")
    return Placement("exact", min(max(mass_above, 0.0), 1.0), prob, 0.0, sum_p2, sum_p3)


def topk_placement(
    own_logprob: float,
    own_key: int,
    top: Sequence[Sequence[float]],
    temperature: float,
    top_k: int,
    top_p: float,
    vocab_size: int,
    noise: float,
) -> Placement:
    """From raw logprobs only (log-softmax before temperature and filters): the token's own and the top K
    alternatives [[key, logprob], ...]. `noise`: how far (nats) the scorer's logits may sit from the sampler's."""
    ranked = sorted(((float(lp), int(key)) for key, lp in top), key=lambda x: -x[0])
    if not ranked:
        return Placement("tail", tail_bound=1.0)
    lps = np.array([lp for lp, _ in ranked], dtype=np.float64)
    keys = [key for _, key in ranked]
    own = keys.index(own_key) if own_key in keys else None
    big_k = len(lps)
    tail_raw = max(0.0, 1.0 - float(np.exp(lps).sum()))  # raw mass below the top K
    if temperature == 1.0 and not top_k and top_p >= 1.0:
        return _lumped_tail(lps, own, tail_raw)

    a = lps / temperature
    q = np.exp(a - a[0])  # relative sampling weights within the top K
    slack = 2 * noise / temperature  # two logits may move towards each other
    tail_hi = _tail_weight_bound(lps, tail_raw, temperature, vocab_size) * math.exp(-a[0])
    kept = np.ones(big_k, dtype=bool)
    tail_possible = vocab_size > big_k
    kth = None
    if top_k and top_k < vocab_size:
        if top_k <= big_k:
            kth = a[top_k - 1]
            kept = a >= kth  # filter_logits keeps ties with the k-th
            tail_possible = False
    sure, unsure = kept.copy(), np.zeros(big_k, dtype=bool)
    nucleus_closed = False  # top-p surely ends within the top K: every token below them is outside
    if top_p < 1.0:
        z_lo = q[kept].sum()
        z_hi = z_lo + (tail_hi if tail_possible else 0.0)
        above = np.concatenate([[0.0], np.cumsum(np.where(kept, q, 0.0))[:-1]])
        p_slack = top_p * math.expm1(2 * slack) + 2 * slack
        surely_in = kept & (above / z_lo < top_p - p_slack)
        surely_out = kept & (above / z_hi >= top_p + p_slack)
        sure, unsure = surely_in, kept & ~surely_in & ~surely_out
        nucleus_closed = bool(surely_out.any()) or q[kept].sum() / z_hi >= top_p + p_slack
        tail_possible = tail_possible and not nucleus_closed
    if own is not None:
        if kth is not None and a[own] < kth:
            return Placement("out" if a[own] < kth - slack else "edge")
        if unsure[own]:
            return Placement("edge")
        if not sure[own]:
            return Placement("out")
    else:
        own_a = own_logprob / temperature
        if kth is not None:
            return Placement("out" if own_a < kth - slack else "edge")
        if not tail_possible:  # no token below the top K can be drawn: outside, or a key the top list spells apart
            return Placement("out" if nucleus_closed else "edge")
    total = q[sure].sum()
    bound = tail_hi / (total + tail_hi) if tail_possible else 0.0
    if own is None:
        return Placement("tail", tail_bound=bound)
    kind = "exact" if not unsure.any() and not tail_possible else "conditional"
    lo = float(q[sure][: int(sure[:own].sum())].sum() / total)
    within = q[sure] / total
    return Placement(kind, lo, float(q[own] / total), bound, float((within**2).sum()), float((within**3).sum()))


def _lumped_tail(lps: np.ndarray, own: int | None, tail_raw: float) -> Placement:
    """Temperature 1, no filters: the raw probabilities are the sampling ones; the tail is one last category whose
    mass is known (1 - the top K's), so the PIT is exact over top K + tail."""
    probs = np.exp(lps)
    total = probs.sum() + tail_raw
    cells = np.append(probs, tail_raw) / total  # the top K and the tail as one category
    p2, p3 = float((cells**2).sum()), float((cells**3).sum())
    if own is None:
        if tail_raw <= 0:
            return Placement("edge")  # the top K hold all the mass as printed: a rounding remainder
        return Placement("exact", float(probs.sum() / total), float(tail_raw / total), 0.0, p2, p3)
    return Placement("exact", float(probs[:own].sum() / total), float(probs[own] / total), 0.0, p2, p3)


def _tail_weight_bound(lps: np.ndarray, tail_raw: float, temperature: float, vocab_size: int) -> float:
    """An upper bound of the sum of p(y)^(1/T) over the tokens y below the top K (their raw mass is tail_raw, each
    below the K-th's p_K). T <= 1: p^(1/T) = p * p^(1/T - 1) <= p * p_K^(1/T - 1). T > 1: the sum of a concave power
    is largest when the mass is spread evenly over the V - K tokens."""
    if tail_raw <= 0:
        return 0.0
    rest = max(vocab_size - len(lps), 0)
    if rest == 0:
        return 0.0
    if temperature <= 1.0:
        return tail_raw * math.exp((1.0 / temperature - 1.0) * float(lps[-1]))
    return rest ** (1.0 - 1.0 / temperature) * tail_raw ** (1.0 / temperature)


def randomized_pit(placements: Sequence[Placement], rng: np.random.Generator) -> np.ndarray:
    """u of every placement in the PIT, in order (one uniform drawn per placement, PIT or not, so the draws of a
    position do not depend on how the others were placed)."""
    v = rng.random(len(placements))
    return np.array([p.lo + v[i] * p.width for i, p in enumerate(placements) if p.in_pit], dtype=np.float64)


def _legendre(u: np.ndarray) -> np.ndarray:
    """The first four orthonormal shifted Legendre polynomials on [0, 1] at u: [4, ...]. Plain products only (no
    `**`, whose vectorised pow differs by CPU in the last bit): each value is the same on every machine."""
    x = 2 * u - 1
    x2 = x * x
    return np.stack(
        [
            math.sqrt(3) * x,
            math.sqrt(5) * (3 * x2 - 1) / 2,
            math.sqrt(7) * (5 * x2 * x - 3 * x) / 2,
            3 * (35 * x2 * x2 - 30 * x2 + 3) / 8,
        ]
    )


def exact_sum(values) -> float:
    """The correctly rounded sum (math.fsum): the same float whatever the order of the terms and the CPU, so a
    verdict cannot move with the order documents come in or the machine it runs on (numpy's pairwise, SIMD-width
    dependent summation moved a p-value's last bit between an Intel Xeon and an AMD EPYC)."""
    return math.fsum(np.asarray(values, dtype=np.float64).ravel().tolist())


@dataclass(frozen=True)
class Uniformity:
    """Neyman's smooth test of u ~ U(0, 1): chi-square statistic (4 degrees of freedom), its p-value, and the four
    normalised components (each ~ N(0, 1) under the null)."""

    statistic: float
    p_value: float
    components: tuple[float, ...]
    n: int


MONTE_CARLO_BELOW_N = 2000  # below it the chi-square tail is liberal (n 300: 0.0057 at 0.005; `simulate smooth`)
MONTE_CARLO_ABOVE_P = 0.05  # where a decision can fall; above it the chi-square p stands
MONTE_CARLO_REPLICATES = 20_000


def smooth_test(u: np.ndarray) -> Uniformity:
    n = len(u)
    if n == 0:
        return Uniformity(0.0, 1.0, (0.0,) * SMOOTH_ORDER, 0)
    terms = _legendre(np.asarray(u, dtype=np.float64))
    components = np.array([exact_sum(row) for row in terms]) / math.sqrt(n)
    statistic = exact_sum(components * components)
    p = math.exp(-statistic / 2) * (1 + statistic / 2)  # chi-square survival function, 4 degrees of freedom
    if n < MONTE_CARLO_BELOW_N and p < MONTE_CARLO_ABOVE_P:
        p = _monte_carlo_p(statistic, n)
    return Uniformity(statistic, min(1.0, p), tuple(float(c) for c in components), n)


def _monte_carlo_p(statistic: float, n: int) -> float:
    """The statistic's exact null p-value at n, by simulation: under the null the u are i.i.d. U(0, 1) whatever
    the run, so the null distribution depends on n alone. (1 + exceed) / (1 + replicates): never 0, and a valid
    p-value when the null draws are fresh for each run; seeded by the run's own statistic, so they are (one fixed set
    of draws for every run would move the test's level by its own sampling error: n 300 at 0.0033 gave 0.0040), and
    a verdict is still reproducible."""
    rng = np.random.default_rng([0x5EED, n, int.from_bytes(np.float64(statistic).tobytes(), "little")])
    exceed, chunk = 0, max(1, 4_000_000 // n)
    for done in range(0, MONTE_CARLO_REPLICATES, chunk):
        k = min(chunk, MONTE_CARLO_REPLICATES - done)
        sums = _legendre(rng.random((k, n))).sum(axis=2) / math.sqrt(n)
        exceed += int(((sums**2).sum(axis=0) >= statistic).sum())
    return (1 + exceed) / (1 + MONTE_CARLO_REPLICATES)


@dataclass(frozen=True)
class Likelihood:
    """The likelihood test: z = (sum p(x) - sum E[p(x)]) / sqrt(sum Var[p(x)]) over the positions it covers, its
    two-sided normal p-value (1.0 when the positions carry too little variance for the normal limit)."""

    z: float
    p_value: float
    observed: float  # sum of the emitted tokens' probabilities
    expected: float
    sd: float
    n: int


MIN_LIKELIHOOD_VARIANCE = 1.0  # below it (a few dozen of uncertain positions) the normal limit is not trusted


def likelihood_test(placements: Sequence[Placement]) -> Likelihood:
    used = [p for p in placements if p.in_pit and p.sum_p2 is not None and p.sum_p3 is not None]
    observed = math.fsum(p.width for p in used)
    expected = math.fsum(p.sum_p2 for p in used)
    variance = math.fsum(max(p.sum_p3 - p.sum_p2 * p.sum_p2, 0.0) for p in used)
    if variance < MIN_LIKELIHOOD_VARIANCE:
        return Likelihood(0.0, 1.0, observed, expected, math.sqrt(variance), len(used))
    z = (observed - expected) / math.sqrt(variance)
    return Likelihood(z, math.erfc(abs(z) / math.sqrt(2)), observed, expected, math.sqrt(variance), len(used))


@dataclass(frozen=True)
class WithinRequests:
    """The within-request test: whether each request's u centre where independent draws would put them. Each
    request's mean-of-u component z_j = sum sqrt(3) (2u - 1) / sqrt(n_j) is N(0, 1)-like when its u are i.i.d.
    U(0, 1); statistic = sum z_j^2 over the requests, the upper tail its p-value (requests spread too far apart).
    `z`: (statistic - its null mean) / its null sd; `request_z`: each request's z_j, in the order given."""

    statistic: float
    p_value: float
    z: float
    requests: int
    request_z: tuple[float, ...]


def within_request_test(
    per_request: Sequence[np.ndarray], weights: Sequence[np.ndarray] | None = None
) -> WithinRequests:
    """Draws that are each right but depend on each other inside a request (a random stream restarted at every
    step: its accept decisions become thresholds fixed per request) keep the pooled u uniform, so the tests on all
    u at once miss them; each request's own u then centre away from 1/2 by more than chance allows, which this sees.
    Valid under the null whatever the requests' lengths: u within a request are i.i.d. U(0, 1) (conditionally
    uniform given the past). The p-value matches the null's mean and variance with a scaled chi-square (E z_j^4 =
    3 - 1.2 / n_j: short requests have lighter tails than chi-square 1), and where that says under 0.05 with
    fewer than MONTE_CARLO_MAX_POSITIONS positions, it is simulated exactly (it depends on the lengths alone).

    `weights` (one array per request, beside its u): each position's component weighted, z_j = sum w sqrt(3)
    (2u - 1) / sqrt(sum w^2), as `likelihood_weights` gives them: the positions where the emitted token's
    probability can vary count, those where one token holds nearly all the mass (their u say nothing about the
    sampler) do not; the within-request view of the likelihood test. The weights are set by the distributions
    before each draw, so under the null each request's weighted sum is a martingale whose simulation at the run's
    own weights is its null (E z_j^4 = 3 - 1.2 sum w^4 / (sum w^2)^2)."""
    if weights is None:
        weights = [np.ones(len(u)) for u in per_request]
    pairs = [
        (np.asarray(u, dtype=np.float64), np.asarray(w, dtype=np.float64))
        for u, w in zip(per_request, weights, strict=True)
        if len(u) and exact_sum(np.asarray(w, dtype=np.float64) ** 2) > 0
    ]
    if not pairs:
        return WithinRequests(0.0, 1.0, 0.0, 0, ())
    w2 = [exact_sum(w * w) for _, w in pairs]
    request_z = [exact_sum(w * math.sqrt(3) * (2 * u - 1)) / math.sqrt(s) for (u, w), s in zip(pairs, w2, strict=True)]
    statistic = math.fsum(z * z for z in request_z)
    # the effective number of positions, (sum w^2)^2 / sum w^4: n_j itself for equal weights
    effective = [s * s / exact_sum(w**4) for (_, w), s in zip(pairs, w2, strict=True)]
    mean, variance = float(len(pairs)), math.fsum(2 - 1.2 / n for n in effective)
    scale, dof = variance / (2 * mean), 2 * mean * mean / variance
    p = float(chi2.sf(statistic / scale, dof))
    if p < MONTE_CARLO_ABOVE_P and sum(len(u) for u, _ in pairs) <= MONTE_CARLO_MAX_POSITIONS:
        # one order for the simulation whatever the documents' order: by length, then by the weights themselves
        ordered = sorted((w for _, w in pairs), key=lambda w: (len(w), w.tolist()))
        p = _within_monte_carlo_p(statistic, ordered)
    z = (statistic - mean) / math.sqrt(variance)
    return WithinRequests(statistic, min(1.0, p), z, len(pairs), tuple(request_z))


MONTE_CARLO_MAX_POSITIONS = 200_000  # above it (hundreds of requests) the scaled chi-square stands


def _within_monte_carlo_p(statistic: float, weights: list[np.ndarray]) -> float:
    """The within-request statistic's exact null p-value for these requests (their lengths and weights, in a fixed
    order: the same draws in any document order), by simulation, seeded by the statistic as the smooth test's is.
    Equal weights seed as the unweighted test always did (the lengths alone)."""
    sizes = [len(w) for w in weights]
    total = sum(sizes)
    replicates = min(MONTE_CARLO_REPLICATES, max(2_000, 60_000_000 // total))
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    flat = np.concatenate(weights)
    norm = np.sqrt(np.add.reduceat(flat * flat, starts))
    rng = np.random.default_rng([0x5EED, len(sizes), total, int.from_bytes(np.float64(statistic).tobytes(), "little")])
    exceed, chunk = 0, max(1, 4_000_000 // total)
    for done in range(0, replicates, chunk):
        k = min(chunk, replicates - done)
        z = np.add.reduceat(flat * math.sqrt(3) * (2 * rng.random((k, total)) - 1), starts, axis=1) / norm
        exceed += int(((z * z).sum(axis=1) >= statistic).sum())
    return (1 + exceed) / (1 + replicates)


def likelihood_weights(placements: Sequence[Placement]) -> np.ndarray:
    """The weight of each PIT placement (in the order `randomized_pit` returns their u) in the weighted
    within-request test: the standard deviation of the emitted token's probability there, sqrt(sum p^3 - (sum
    p^2)^2), the likelihood test's own scale of a position (0 where unknown)."""
    return np.array(
        [
            math.sqrt(max(p.sum_p3 - p.sum_p2 * p.sum_p2, 0.0))
            if p.sum_p2 is not None and p.sum_p3 is not None
            else 0.0
            for p in placements
            if p.in_pit
        ],
        dtype=np.float64,
    )


def tail_test(bounds: Sequence[float], observed: int) -> float:
    """P(N >= observed) for N a sum of independent Bernoulli(bound_i): an upper bound of the p-value of `observed`
    draws below the known top logprobs, when each position's true probability of such a draw is at most its bound
    given the past (a sequential coupling makes the true count no larger than N)."""
    bounds = sorted(b for b in bounds if b > 0)  # one order for the products, whatever the documents' order
    if observed <= 0:
        return 1.0
    if observed > len(bounds):
        return 0.0
    dist = np.zeros(observed + 1)  # P(count = j) for j < observed, and P(count >= observed) in the last cell
    dist[0] = 1.0
    for b in bounds:
        moved = dist[:-1] * b
        dist[:-1] *= 1 - b
        dist[1:] += moved
    return float(min(1.0, dist[-1]))


def histogram(u: np.ndarray, bins: int = 20) -> list[int]:
    """Counts of u in `bins` equal bins of [0, 1]: what the report plots (flat under the null)."""
    counts, _ = np.histogram(u, bins=bins, range=(0.0, 1.0))
    return [int(c) for c in counts]
