"""The clustered standard error checked by simulation: does the error a run states (stats.clustered) match the
spread of its score over repeated runs, when the samples of a question are correlated?

Model: D documents, each with its own probability of a right answer p_d ~ Beta with mean `mean` and intra-class
correlation `icc` (the correlation of two samples of one question: 0 independent, 1 always alike), N samples per
document, each right with probability p_d. Per simulated run: the score (mean of per-document means), its clustered
standard error and the naive one (all samples as independent). Printed side by side: the true standard deviation
of the score (from the model), the simulated one, the root-mean-square of each stated error, the coverage of
score +- 1.96 se, and the false-FAIL rate of the accuracy gate when nothing changed: the reference is another run of
the same design and model (the two-sample model TensorRT-LLM's formula assumes), the gate's n the effective sample
count (the accuracy gate), against the same gate fed all N x D samples as independent, and the sequential
design fed per-document means (the sequential accuracy test, sigma 50 per document).

`--from-groups FILE` instead resamples a recorded run (JSON {doc: [0 or 1, ...]}): its documents with replacement, each
with all its samples (a cluster bootstrap: resampling the samples within a document too would count their spread a
second time), and prints the run's stated error beside the bootstrap spread of its score.

    python -m specdec_eval.studies.clustered_scores --docs 20 --repeats 4 --mean 30 --icc 0.3
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.special import ndtri

from ..stats.clustered import clustered_score

Z95 = 1.959964


@dataclass(frozen=True)
class SimulationResult:
    docs: int
    repeats: int
    mean: float
    icc: float
    sims: int
    true_sd: float
    simulated_sd: float
    stated_se_rms: float
    naive_se_rms: float
    coverage: float
    naive_coverage: float
    gate_false_fail: float
    naive_gate_false_fail: float
    sequential_false_fail: float
    alpha: float


def beta_parameters(mean: float, icc: float) -> tuple[float, float]:
    """Beta(a, b) with the given mean and intra-class correlation 1 / (a + b + 1)."""
    if not 0 < mean < 1 or not 0 < icc < 1:
        raise ValueError("mean and icc must lie strictly between 0 and 1")
    total = (1 - icc) / icc
    return mean * total, (1 - mean) * total


def simulate(
    docs: int, repeats: int, mean: float, icc: float, sims: int = 20_000, seed: int = 0, alpha: float = 0.05
) -> SimulationResult:
    """mean and icc as fractions (mean 0.3 = a score of 30)."""
    rng = np.random.default_rng(seed)
    m, score, se, se_naive = _runs(rng, docs, repeats, mean, icc, sims)
    _, ref_score, _, _ = _runs(rng, docs, repeats, mean, icc, sims)  # the reference: another run of the same design
    true_sd = 100.0 * math.sqrt(mean * (1 - mean) * (icc + (1 - icc) / repeats) / docs)
    truth = 100.0 * mean
    n = docs * repeats
    z_alpha = float(ndtri(alpha))
    deff = np.where(se_naive > 0, np.clip((se / np.where(se_naive > 0, se_naive, 1.0)) ** 2, 1.0, repeats), repeats)
    threshold = ref_score + z_alpha * np.sqrt(2 * 50.0**2 / (n / deff))  # stats.hypothesis at n = n_eff
    naive_threshold = ref_score + z_alpha * math.sqrt(2 * 50.0**2 / n)
    return SimulationResult(
        docs,
        repeats,
        mean,
        icc,
        sims,
        true_sd,
        simulated_sd=float(score.std(ddof=1)),
        stated_se_rms=float(np.sqrt(np.mean(se**2))),
        naive_se_rms=float(np.sqrt(np.mean(se_naive**2))),
        coverage=float(np.mean(np.abs(score - truth) <= Z95 * se)),
        naive_coverage=float(np.mean(np.abs(score - truth) <= Z95 * se_naive)),
        gate_false_fail=float(np.mean(score < threshold)),
        naive_gate_false_fail=float(np.mean(score < naive_threshold)),
        sequential_false_fail=_sequential_false_fail(m, ref_score, alpha),
        alpha=alpha,
    )


def _runs(rng: np.random.Generator, docs: int, repeats: int, mean: float, icc: float, sims: int):
    """`sims` runs: per-document means, scores, clustered and naive standard errors."""
    a, b = beta_parameters(mean, icc)
    right = rng.binomial(repeats, rng.beta(a, b, size=(sims, docs)))  # per document: how many samples are right
    m = 100.0 * right / repeats
    n = docs * repeats
    total = right.sum(axis=1)
    var_all = (100.0**2) * (total - total**2 / n) / (n - 1)  # all N x D samples as independent
    return m, m.mean(axis=1), m.std(axis=1, ddof=1) / math.sqrt(docs), np.sqrt(var_all / n)


def _sequential_false_fail(m: np.ndarray, ref: np.ndarray, alpha: float) -> float:
    """The group-sequential design (four looks, sigma 50 per document) on per-document means; its boundaries do not
    depend on the reference's value, only the statistic does."""
    from ..evals.sequential.accuracy import AccuracySequentialDesign

    docs = m.shape[1]
    design = AccuracySequentialDesign.for_batches(50.0, docs, max(1, docs // 4), alpha=alpha)
    looks = np.asarray(design.looks)
    failed, _ = design.outcomes(np.cumsum(m, axis=1)[:, looks - 1] / looks, ref)
    return float(failed.mean())


def bootstrap(groups: dict, resamples: int = 20_000, seed: int = 0) -> dict[str, float]:
    """A recorded run's stated error against the cluster-bootstrap spread of its score (0/1 or 0/100 values)."""
    rng = np.random.default_rng(seed)
    rows = [np.asarray(v, dtype=float) for v in groups.values() if len(v)]
    scale = 100.0 if max(float(r.max()) for r in rows) <= 1 else 1.0
    means = np.array([scale * r.mean() for r in rows])
    stated = clustered_score({i: list(scale * r) for i, r in enumerate(rows)})
    scores = means[rng.integers(0, len(means), size=(resamples, len(means)))].mean(axis=1)
    return {
        "score": stated.score,
        "stated_se": stated.se or 0.0,
        "naive_se": stated.se_naive or 0.0,
        "bootstrap_sd": float(scores.std(ddof=1)),
        "design_effect": stated.design_effect,
        "n_effective": stated.n_effective,
        "docs": stated.n_docs,
        "samples": stated.n_samples,
    }


def render(r: SimulationResult) -> str:
    return "\n".join(
        [
            f"{r.docs} documents x {r.repeats} samples, true mean {100 * r.mean:g}, intra-class correlation {r.icc:g}, "
            f"{r.sims} simulated runs",
            f"  standard deviation of the score: true {r.true_sd:.3f}, simulated {r.simulated_sd:.3f}",
            f"  stated standard error (rms):     clustered {r.stated_se_rms:.3f}, "
            f"as if independent {r.naive_se_rms:.3f}",
            f"  95% interval covers the mean:    clustered {100 * r.coverage:.1f}%, as if independent "
            f"{100 * r.naive_coverage:.1f}%",
            f"  accuracy gate false FAIL, nothing changed (alpha {r.alpha:g}): "
            f"n effective {100 * r.gate_false_fail:.1f}%, "
            f"n = all samples {100 * r.naive_gate_false_fail:.1f}%, sequential on per-document means "
            f"{100 * r.sequential_false_fail:.1f}%",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m specdec_eval.studies.clustered_scores",
        description="Check the clustered standard error of a score over several samples per document by simulation.",
        epilog="example: python -m specdec_eval.studies.clustered_scores --docs 20 --repeats 4 --mean 30 --icc 0.3",
    )
    parser.add_argument("--docs", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--mean", type=float, default=30.0, help="true score, 0-100 (default 30)")
    parser.add_argument(
        "--icc",
        type=float,
        nargs="+",
        default=[0.0001, 0.3, 0.7],
        help="intra-class correlations to simulate (default 0.0001 0.3 0.7)",
    )
    parser.add_argument("--sims", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--from-groups", type=Path, help="a recorded run's {doc: [0/1, ...]} JSON: bootstrap it")
    args = parser.parse_args(argv)
    if args.from_groups is not None:
        b = bootstrap(json.loads(args.from_groups.read_text()), args.sims, args.seed)
        print(
            f"{b['docs']} documents, {b['samples']} samples: score {b['score']:.2f}; standard error stated "
            f"{b['stated_se']:.3f} (clustered), {b['naive_se']:.3f} as if independent; cluster bootstrap "
            f"{b['bootstrap_sd']:.3f}; design effect {b['design_effect']:.2f}"
        )
        return 0
    if args.docs < 2 or args.repeats < 1 or not 0 < args.mean < 100:
        parser.error("--docs >= 2, --repeats >= 1 and 0 < --mean < 100")
    for icc in args.icc:
        print(render(simulate(args.docs, args.repeats, args.mean / 100.0, icc, args.sims, args.seed, args.alpha)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
