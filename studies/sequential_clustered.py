"""`python -m specdec_eval.studies.sequential_clustered`: do the sequential designs keep their error rates when a
document has several correlated samples (`--repeats`)?

Model (as the clustered_scores study): D documents, each with its own chance p_d of a right answer drawn from a Beta
with mean `ref` and intra-class correlation `icc` (the correlation of two samples of one question: 0 independent,
1 always alike); R samples per document, each right with chance p_d. A run's documents come in a seeded random order,
so a simulated run is D such documents in a row.

Accuracy (`run --early-stop`): the design over D documents, looks every `batch` documents, judging the
mean of per-document means, sigma 50 per document. Printed per icc: the false-FAIL rate when the true mean is the
reference, with the reference exact and with it a noisy mean of D single samples (the two-sample model); the same
false-FAIL rate of the design a run would get by taking all R x D samples as independent (a variance model that
ignores the clustering: what this study exists to catch); the power at ref - theta (theta: the design's minimum
detectable effect over D documents); and the documents a run evaluates on average, at ref and at ref - theta.

A/B (`ab --early-stop`, sequential.ab_watch): two sides with the same p_d per document and independent samples (no
difference), each document counted "B worse" or "B better" by its mean (stats.clustered `document_signs`),
the discordant documents fed to the SPRT (sequential.discordant_pairs) in order: its false B-WORSE rate.

    python -m specdec_eval.studies.sequential_clustered --docs 198 --repeats 4 --batch 32 --ref 65
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass

import numpy as np

from ..evals.sequential.accuracy import AccuracySequentialDesign
from ..evals.sequential.discordant_pairs import B_WORSE, PairedSequentialDesign
from .clustered_scores import beta_parameters

EXAMPLE = "example: python -m specdec_eval.studies.sequential_clustered --docs 198 --repeats 4 --batch 32 --ref 65"


@dataclass(frozen=True)
class ClusteredOperatingPoint:
    """One intra-class correlation's row: rates over `sims` simulated runs (A/B rate over `ab_sims`)."""

    icc: float
    false_fail: float  # true mean = ref, reference exact
    false_fail_noisy_ref: float  # true mean = ref, reference a mean of D single samples
    false_fail_as_independent: float  # the design over R x D samples as if independent (wrong for icc > 0)
    power: float  # P(FAIL) at ref - theta, reference exact
    documents_at_ref: float
    documents_at_alternative: float
    ab_false_b_worse: float
    sims: int
    ab_sims: int


def document_means(rng: np.random.Generator, sims: int, docs: int, repeats: int, mean: float, icc: float) -> np.ndarray:
    """sims x docs per-document mean scores (0-100) of R samples each; mean as a fraction."""
    mean = min(max(mean, 1e-6), 1 - 1e-6)  # a Beta needs a mean strictly inside (0, 1)
    a, b = beta_parameters(mean, icc)
    return document_means_of(rng, rng.beta(a, b, size=(sims, docs)), repeats)


def document_means_of(rng: np.random.Generator, p: np.ndarray, repeats: int) -> np.ndarray:
    """Per-document mean scores (0-100) of R samples drawn at the documents' chances p."""
    return 100.0 * rng.binomial(repeats, p) / repeats


def at_looks(design: AccuracySequentialDesign, means: np.ndarray) -> np.ndarray:
    """Each run's score at each look: the mean of the per-document means of the documents done by then."""
    looks = np.asarray(design.looks)
    return np.cumsum(means, axis=1)[:, looks - 1] / looks


def study(
    docs: int,
    repeats: int,
    batch: int,
    ref: float,
    icc: float,
    alpha: float = 0.05,
    beta: float = 0.2,
    sims: int = 20_000,
    ab_sims: int = 2_000,
    seed: int = 0,
) -> ClusteredOperatingPoint:
    """One row of the table (see the module docstring); ref on the 0-100 scale."""
    rng = np.random.default_rng(seed)
    design = AccuracySequentialDesign.for_batches(ref, docs, batch, alpha=alpha, beta=beta, repeats=repeats)
    null = document_means(rng, sims, docs, repeats, ref / 100.0, icc)
    failed, stopped_at = design.outcomes(at_looks(design, null), ref)
    noisy_ref = 100.0 * rng.binomial(docs, ref / 100.0, size=sims) / docs
    failed_noisy, _ = design.outcomes(at_looks(design, null), noisy_ref)
    # The same scores judged as R x D independent samples: looks every batch x R samples.
    independent = AccuracySequentialDesign.for_batches(ref, docs * repeats, batch * repeats, alpha=alpha, beta=beta)
    failed_independent, _ = independent.outcomes(at_looks(design, null), ref)
    alternative = document_means(rng, sims, docs, repeats, (ref - design.theta) / 100.0, icc)
    power, stopped_alt = design.outcomes(at_looks(design, alternative), ref)
    ab = ab_false_alarm(rng, docs, repeats, ref, icc, alpha, ab_sims)
    return ClusteredOperatingPoint(
        icc,
        float(failed.mean()),
        float(failed_noisy.mean()),
        float(failed_independent.mean()),
        float(power.mean()),
        float(stopped_at.mean()),
        float(stopped_alt.mean()),
        ab,
        sims,
        ab_sims,
    )


def ab_false_alarm(
    rng: np.random.Generator, docs: int, repeats: int, ref: float, icc: float, alpha: float, sims: int
) -> float:
    """P(B-WORSE) of the sequential A/B when both sides are the same model: per document one chance p_d, each side
    its own R samples; a document's sign by its means, the discordant ones to the SPRT in order."""
    design = PairedSequentialDesign(alpha=alpha)
    mean = min(max(ref / 100.0, 1e-6), 1 - 1e-6)
    a, b = beta_parameters(mean, icc)
    p = rng.beta(a, b, size=(sims, docs))
    signs = np.sign(document_means_of(rng, p, repeats) - document_means_of(rng, p, repeats))
    worse = sum(design.scan(row[row != 0] > 0, final=True).verdict == B_WORSE for row in signs)
    return worse / sims if sims else float("nan")


def render(
    rows: list[ClusteredOperatingPoint],
    docs: int,
    repeats: int,
    batch: int,
    ref: float,
    alpha: float,
    beta: float,
    seed: int,
) -> str:
    design = AccuracySequentialDesign.for_batches(ref, docs, batch, alpha=alpha, beta=beta, repeats=repeats)
    sims, ab_sims = rows[0].sims, rows[0].ab_sims
    se = math.sqrt(alpha * (1 - alpha) / sims)
    lines = [
        f"Sequential accuracy design on clustered samples: {docs} documents x {repeats} samples, looks every {batch} "
        f"documents ({len(design.looks)} looks), ref {ref:g}, alpha {alpha:g}, beta {beta:g}, sigma {design.sigma:g} "
        f"per document mean; theta {design.theta:.2f} (ref - theta {ref - design.theta:.2f})",
        f"{sims} simulated runs per cell (Monte-Carlo standard error at alpha: {se:.4f}), A/B {ab_sims}, seed {seed}",
        "",
        f"  {'icc':>7}{'false FAIL':>12}{'noisy ref':>11}{'as if indep.':>14}{'power':>8}{'E[docs] ref':>13}"
        f"{'E[docs] ref-theta':>19}{'A/B false B-WORSE':>19}",
    ]
    for r in rows:
        lines.append(
            f"  {r.icc:>7.4g}{r.false_fail:>12.4f}{r.false_fail_noisy_ref:>11.4f}"
            f"{r.false_fail_as_independent:>14.4f}{r.power:>8.4f}{r.documents_at_ref:>13.1f}"
            f"{r.documents_at_alternative:>19.1f}{r.ab_false_b_worse:>19.4f}"
        )
    lines += [
        "",
        f"  false FAIL: true mean = ref, reference exact; noisy ref: the reference a mean of {docs} single samples; "
        f"as if indep.: the same scores judged as {docs * repeats} independent samples (the variance model the "
        "design must not use); power: P(FAIL) at ref - theta; A/B: same model on both sides, documents signed by "
        "their means",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m specdec_eval.studies.sequential_clustered",
        description="False-stop rate and power of the sequential designs when each document has several correlated "
        "samples (--repeats), by simulation.",
        epilog=EXAMPLE,
    )
    parser.add_argument("--docs", type=int, default=198, help="documents D (default 198: GPQA-Diamond)")
    parser.add_argument("--repeats", type=int, default=4, help="samples per document R (default 4)")
    parser.add_argument("--batch", type=int, default=32, help="documents per look (default 32)")
    parser.add_argument("--ref", type=float, default=65.0, help="reference score, 0-100 (default 65)")
    parser.add_argument(
        "--icc",
        type=float,
        nargs="+",
        default=[0.0001, 0.3, 0.7, 0.95],
        help="intra-class correlations (default 0.0001 0.3 0.7 0.95)",
    )
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--beta", type=float, default=0.2)
    parser.add_argument("--sims", type=int, default=20_000, help="simulated runs per cell (default 20000)")
    parser.add_argument("--ab-sims", type=int, default=2_000, help="simulated A/Bs per row (default 2000)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.docs < 2 or args.repeats < 1 or args.batch < 1 or not 0 < args.ref < 100 or args.sims < 1:
        parser.error("need --docs >= 2, --repeats >= 1, --batch >= 1, 0 < --ref < 100, --sims >= 1")
    if not all(0 < icc < 1 for icc in args.icc):
        parser.error("each --icc must lie strictly between 0 and 1")
    rows = [
        study(
            args.docs,
            args.repeats,
            args.batch,
            args.ref,
            icc,
            args.alpha,
            args.beta,
            args.sims,
            args.ab_sims,
            args.seed + i,
        )
        for i, icc in enumerate(args.icc)
    ]
    print(render(rows, args.docs, args.repeats, args.batch, args.ref, args.alpha, args.beta, args.seed))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
