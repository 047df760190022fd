"""Acceptance paired by document: did B's drafter get worse than A's on the same documents?

Two runs over the same documents give, per document i, A's draft cycles and accepted drafts (c_i, a_i) and B's
(c'_i, a'_i). Each run's acceptance length is a ratio of sums, AL = 1 + sum(a) / sum(c), and the question is
its relative change R = AL_B / AL_A - 1 (a 5 % drop: R = -0.05, TensorRT-LLM's min_al = 0.95 ref_al).

**Why pairing.** The spread of AL between documents (some texts are easy to draft, others not) is far larger
than a 5 % drop, and it is common to both runs: greedy outputs that stay identical mean the drafter of each side
sees the very same contexts. A document's difference removes what the two sides share, so the same drop is seen
with far fewer documents than a comparison of B's AL with a reference (the acceptance gate).

**Test: a paired t on the linearised ratio, clustered by document**, with the drop itself shown by a swap test.
Per document, the influence of its counts on each side's AL (delta method, the model of the gate's sampling error) is

    phi_i = (a_i - r c_i) / mean(c),   r = sum(a) / sum(c)          (A's; phi'_i likewise for B),

and on R it is psi_i = phi'_i / AL_A - AL_B phi_i / AL_A^2. The psi_i are independent across documents (the units;
the cycles inside one are not), sum to zero, and SE(R) = sqrt(sum(psi_i^2) / (n (n - 1))); T = R / SE is referred to
Student's t with n - 1 degrees of freedom. Unlike a bootstrap of per-document ALs (which over-weights short answers)
it keeps AL's weighting by cycles, and it gives a standard error at every look, which the sequential A/B
(sequential.acceptance_ab) needs. Error rates from real runs: `python -m specdec_eval.studies.sequential_acceptance`.

**The swap test.** On the embedded default's real documents the t alone showed a drop in 8.8 % of no-change A/Bs of
ten documents (5.6 % at 200): the per-document changes are skewed and heavy-tailed. Under no change a document's A and
B are exchangeable, so exchanging them at random and recomputing R gives an exact p-value for a drop at any n
(`swap_p_values`: all 2^n exchanges up to n = 12, else 4096 seeded random ones); `compare` shows a drop with it
(`judge_pairs`). Ruling a drop of `drop` out has no such symmetry and stays with the t.

**Decisions** (alpha for a drop, beta for ruling one out; one-sided each):
- DROP: the swap test's p-value for a lower R is below alpha (with no swap test, T < t(alpha)): B's AL is lower (a
  drop of any size is shown);
- NO-DROP: (R + drop) / SE > t(1 - beta): a drop as large as `drop` is ruled out (a drop smaller than that may
  still be shown as DROP: both hold, and the record says both);
- INCONCLUSIVE: neither; the record says what drop this n would detect with power 1 - beta and how many
  documents `drop` needs at this per-document spread.
With several samples per document (`--repeats`) the document stays the unit: its counts on each side are summed over
its samples (by the results that read them), whose acceptance is no more independent than their scores.
Runs recorded before per-document counts existed carry only each sample's AL: then each document weighs the same
(c_i = 1, a_i = AL_i - 1), and `weighted` says so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

DROP, NO_DROP, INCONCLUSIVE = "DROP", "NO-DROP", "INCONCLUSIVE"
DEFAULT_DROP = 0.05  # TensorRT-LLM's min_al = 0.95 ref_al; vLLM's rtol
DEFAULT_ALPHA, DEFAULT_BETA = 0.05, 0.2

Counts = tuple[float, float]  # (draft cycles, accepted drafts) of one document on one side


@dataclass(frozen=True)
class PairedAcceptance:
    """The relative change of AL from A to B over n paired documents, with its standard error."""

    n: int
    al_a: float
    al_b: float
    relative: float  # AL_B / AL_A - 1
    std_error: float  # of `relative`, documents as clusters (0.0 with fewer than two documents)
    weighted: bool  # by each document's cycles (its counts were recorded), else each document weighs one

    @property
    def per_document_sd(self) -> float:
        """The spread of one document's influence on R: SE sqrt(n). Documents needed scale with its square."""
        return self.std_error * math.sqrt(self.n)


def paired_acceptance(pairs: Sequence[tuple[Counts, Counts]], weighted: bool = True) -> PairedAcceptance | None:
    """The estimate over these documents (None when no document drafted on both sides)."""
    import numpy as np

    kept = [(a, b) for a, b in pairs if a[0] > 0 and b[0] > 0]
    if not kept:
        return None
    counts = np.asarray([(a[0], a[1], b[0], b[1]) for a, b in kept], dtype=float)
    al_a, al_b, relative, se = ratio_change(*counts.T)
    return PairedAcceptance(len(kept), al_a, al_b, relative, se, weighted)


def ratio_change(cycles_a, accepted_a, cycles_b, accepted_b) -> tuple[float, float, float, float]:
    """(AL_A, AL_B, AL_B / AL_A - 1, its standard error) from per-document arrays (numpy), documents as clusters:
    the one computation behind `paired_acceptance` and the simulations of the sequential design."""
    n = len(cycles_a)
    ratio_a, ratio_b = accepted_a.sum() / cycles_a.sum(), accepted_b.sum() / cycles_b.sum()
    al_a, al_b = 1.0 + float(ratio_a), 1.0 + float(ratio_b)
    se = 0.0
    if n >= 2:
        phi_a = (accepted_a - ratio_a * cycles_a) / cycles_a.mean()
        phi_b = (accepted_b - ratio_b * cycles_b) / cycles_b.mean()
        psi = phi_b / al_a - al_b * phi_a / al_a**2
        se = float(math.sqrt(float((psi * psi).sum()) / (n * (n - 1))))
    return al_a, al_b, al_b / al_a - 1.0, se


@dataclass(frozen=True)
class PairedAcceptanceTest:
    """The fixed-n paired test's record (see the module docstring)."""

    verdict: str  # DROP | NO-DROP | INCONCLUSIVE
    drop_shown: bool
    drop_ruled_out: bool
    n: int
    al_a: float
    al_b: float
    relative: float
    std_error: float
    p_drop: float | None  # one-sided p of "B's AL is lower"
    p_as_large: float | None  # one-sided p of "the drop is at least `drop`" (small: ruled out)
    rise_shown: bool
    detectable_drop: float | None  # what this n detects with power 1 - beta (relative)
    documents_for_drop: int | None  # documents `drop` needs at this spread (None: no spread measured)
    drop: float
    alpha: float
    beta: float
    weighted: bool
    method: str
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in asdict(self).items()}


METHOD = "paired t on the cycle-weighted AL ratio, documents as clusters (delta method)"


SWAPS = 4096  # the swap test's random swaps (every one of the 2^n when that is fewer: n <= 12)
SWAP_METHOD = "a drop shown by the swap test (each document's A and B exchanged: {how})"


def judge_pairs(
    pairs: Sequence[tuple[Counts, Counts]],
    weighted: bool = True,
    drop: float = DEFAULT_DROP,
    alpha: float = DEFAULT_ALPHA,
    beta: float = DEFAULT_BETA,
    swaps: int = SWAPS,
    seed: int = 0,
) -> PairedAcceptanceTest | None:
    """The paired test of these documents as `compare` applies it: the estimate, a drop shown by the swap test, a
    drop of `drop` ruled out by the t (None when no document drafted on both sides)."""
    kept = [(a, b) for a, b in pairs if a[0] > 0 and b[0] > 0]
    estimate = paired_acceptance(kept, weighted)
    if estimate is None:
        return None
    return paired_acceptance_test(estimate, drop, alpha, beta, swap_p_values(kept, swaps, seed))


def swap_p_values(
    pairs: Sequence[tuple[Counts, Counts]], swaps: int = SWAPS, seed: int = 0
) -> tuple[float, float, str]:
    """(P(R* <= R), P(R* >= R), how) where R* is the relative change with each document's two sides exchanged at
    random: under no change A and B of a document are exchangeable, so these are exact p-values for a drop and a
    rise whatever the documents' spread (every one of the 2^n exchanges when that is at most `swaps`, else `swaps`
    seeded random ones, counted with the observed one)."""
    import itertools

    import numpy as np

    counts = np.asarray([(a[0], a[1], b[0], b[1]) for a, b in pairs], dtype=float)
    n = len(counts)
    if 2**n <= swaps:
        masks = np.asarray(list(itertools.product((0.0, 1.0), repeat=n)), dtype=float)
        how, extra = f"all {2**n} exchanges", 0
    else:
        masks = (np.random.default_rng(seed).random((swaps, n)) < 0.5).astype(float)
        how, extra = f"{swaps} random exchanges, seed {seed}", 1
    d_cycles, d_accepted = counts[:, 2] - counts[:, 0], counts[:, 3] - counts[:, 1]
    cycles_a = counts[:, 0].sum() + masks @ d_cycles
    accepted_a = counts[:, 1].sum() + masks @ d_accepted
    cycles_b = counts[:, 2].sum() - masks @ d_cycles
    accepted_b = counts[:, 3].sum() - masks @ d_accepted
    swapped = (1 + accepted_b / cycles_b) / (1 + accepted_a / cycles_a) - 1
    observed = (1 + counts[:, 3].sum() / counts[:, 2].sum()) / (1 + counts[:, 1].sum() / counts[:, 0].sum()) - 1
    tie = 1e-12 * max(1.0, abs(observed))
    lower = (extra + int((swapped <= observed + tie).sum())) / (extra + len(masks))
    upper = (extra + int((swapped >= observed - tie).sum())) / (extra + len(masks))
    return lower, upper, how


def paired_acceptance_test(
    estimate: PairedAcceptance,
    drop: float = DEFAULT_DROP,
    alpha: float = DEFAULT_ALPHA,
    beta: float = DEFAULT_BETA,
    swap: tuple[float, float, str] | None = None,
) -> PairedAcceptanceTest:
    """DROP, NO-DROP or INCONCLUSIVE for a drop of `drop` (relative) at one-sided alpha and beta. `swap`: the swap
    test's p-values (`swap_p_values`) decide whether a drop (or a rise) is shown; without them, the t does."""
    if not (0 < alpha < 1 and 0 < beta < 1 and 0 < drop < 1):
        raise ValueError(f"alpha, beta and drop must lie in (0, 1), got {alpha}, {beta}, {drop}")
    from scipy.stats import t

    e = estimate
    method = METHOD if e.weighted else METHOD + "; per-document ALs, each weighing one (no counts recorded)"
    at = f"AL {e.al_a:.4f} -> {e.al_b:.4f} ({e.relative:+.2%}) over {e.n} paired documents"
    documents = None
    if e.n < 2:
        return PairedAcceptanceTest(
            INCONCLUSIVE,
            False,
            False,
            e.n,
            e.al_a,
            e.al_b,
            e.relative,
            e.std_error,
            None,
            None,
            False,
            None,
            None,
            drop,
            alpha,
            beta,
            e.weighted,
            method,
            f"INCONCLUSIVE: {at}: a paired test needs two documents",
        )
    if e.std_error == 0.0:  # every document's counts moved in proportion (identical runs: not at all)
        shown, ruled_out, rise = e.relative < 0, e.relative > -drop, e.relative > 0
        p_drop, p_large = float(e.relative >= 0), float(e.relative <= -drop)  # certain either way
        detectable = 0.0
        documents = 2
    else:
        df = e.n - 1
        stat = e.relative / e.std_error
        p_drop, p_large, p_rise = (
            float(t.cdf(stat, df)),
            float(t.sf((e.relative + drop) / e.std_error, df)),
            float(t.sf(stat, df)),
        )
        if swap is not None:
            p_drop, p_rise = swap[0], swap[1]
            method = SWAP_METHOD.format(how=swap[2]) + "; a drop ruled out by the " + method
        shown, ruled_out, rise = p_drop < alpha, p_large < beta, p_rise < alpha
        detectable = detectable_drop(e.n, e.std_error, alpha, beta)
        documents = documents_for_drop(e.per_document_sd, drop, alpha, beta)
    verdict = DROP if shown else NO_DROP if ruled_out else INCONCLUSIVE
    if shown:
        reason = f"DROP: {at}, p = {p_drop:.3g} < {alpha:g}"
        reason += f" (smaller than {drop:.0%}: a {drop:.0%} drop is ruled out too)" if ruled_out else ""
    elif ruled_out:
        reason = f"NO-DROP: {at}: a {drop:.0%} drop is ruled out (p = {p_large:.3g} < {beta:g})"
    else:
        reason = (
            f"INCONCLUSIVE: {at}: this n detects a drop of {detectable:.1%} with power {1 - beta:.0%}; a "
            f"{drop:.0%} drop needs about {documents} documents at this spread"
        )
    return PairedAcceptanceTest(
        verdict,
        shown,
        ruled_out,
        e.n,
        e.al_a,
        e.al_b,
        e.relative,
        e.std_error,
        p_drop,
        p_large,
        rise,
        detectable,
        documents,
        drop,
        alpha,
        beta,
        e.weighted,
        method,
        reason,
    )


def detectable_drop(n: int, std_error: float, alpha: float = DEFAULT_ALPHA, beta: float = DEFAULT_BETA) -> float:
    """The relative drop a fixed one-sided paired t at n documents detects with power 1 - beta."""
    from scipy.stats import t

    return float((t.ppf(1 - alpha, n - 1) + t.ppf(1 - beta, n - 1)) * std_error)


def documents_for_drop(
    per_document_sd: float, drop: float, alpha: float = DEFAULT_ALPHA, beta: float = DEFAULT_BETA
) -> int:
    """Documents a fixed one-sided paired test needs for power 1 - beta at `drop`, at this per-document spread."""
    from scipy.stats import norm

    z = float(norm.ppf(1 - alpha) + norm.ppf(1 - beta))
    return max(2, math.ceil((z * per_document_sd / drop) ** 2))
