"""Scores over several samples per document, clustered by document: the samples of one question are not independent.

With N samples of each of D documents (lm-eval's `repeats`, at temperature > 0), y[d][r] in {0, 100}:

    per-document mean   m_d = mean_r y[d][r]
    score               x   = mean_d m_d                      (avg@N; with equal N, the mean of all N x D samples)
    standard error      se  = sd(m_1 .. m_D) / sqrt(D)        (sample sd, ddof 1: the between-document spread)

The documents are the independent units; a question the model always gets right (or never) contributes one unit of
information however often it is asked, so the N x D samples may not be treated as independent: their naive standard
error sd(all y) / sqrt(N D) is too small by the square root of the design effect

    deff = se^2 / se_naive^2        (1: samples of a question as independent as samples of different questions;
                                     N: every sample of a question agrees)

and the effective sample count is n_eff = N D / deff, between D and N D (clamped there: the estimate of deff can
stray outside [1, N] by chance). With N = 1 every formula reduces to the usual one: se = sd / sqrt(D), deff = 1,
n_eff = D. The clustered_scores study checks se against the spread of simulated clustered scores.

Paired runs (`compare`, `ab`) pair documents, not samples: d_d = m_d(B) - m_d(A), mean difference mean(d), standard
error sd(d) / sqrt(D), a two-sided normal test (Obuchowski's clustered McNemar test in this form; with one sample per
document the exact McNemar test is used instead). The sequential A/B test counts a document "B worse" when its mean
under B is below A's, "B better" when above (`document_signs`): under no difference the two are equally likely and
the documents independent, so its false-alarm guarantee holds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

Groups = Mapping[Any, Sequence[float]]  # document -> its samples' scores (0-100 or 0/1)


@dataclass(frozen=True)
class ClusteredScore:
    n_docs: int
    n_samples: int
    score: float  # mean of per-document means
    se: float | None  # clustered standard error (None with fewer than 2 documents)
    se_naive: float | None  # as if all samples were independent (the error repeats must not claim)
    design_effect: float  # se^2 / se_naive^2, clamped to [1, mean samples per document]
    n_effective: float  # n_samples / design_effect: the sample count the accuracy gate's formula takes

    @property
    def repeats(self) -> float:
        """Mean samples per document."""
        return self.n_samples / self.n_docs if self.n_docs else 0.0

    def describe(self) -> str:
        if self.n_docs and self.n_samples == self.n_docs:
            return f"score {self.score:.2f} over {self.n_docs} documents, standard error {_num(self.se)}"
        return (
            f"score {self.score:.2f} over {self.n_docs} documents x {self.repeats:g} samples, standard error "
            f"{_num(self.se)} clustered by document (as if independent: {_num(self.se_naive)}; design effect "
            f"{self.design_effect:.2f}, effective samples {self.n_effective:.1f})"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "n_docs": self.n_docs,
            "n_samples": self.n_samples,
            "score": self.score,
            "se": self.se,
            "se_naive": self.se_naive,
            "design_effect": self.design_effect,
            "n_effective": self.n_effective,
            "method": "per-document means (clustered by document)",
        }


def clustered_score(groups: Groups) -> ClusteredScore:
    """The score of documents' samples and its clustered standard error; documents with no sample are left out."""
    means, values = [], []
    for samples in groups.values():
        xs = [float(x) for x in samples]
        if xs:
            means.append(sum(xs) / len(xs))
            values += xs
    d, n = len(means), len(values)
    if d == 0:
        raise ValueError("no samples to score")
    score = sum(means) / d
    se = math.sqrt(_variance(means) / d) if d > 1 else None
    se_naive = math.sqrt(_variance(values) / n) if n > 1 else None
    per_doc = n / d
    if se is None or not se_naive:  # nothing varies: the within-document correlation cannot be estimated
        deff = per_doc
    else:
        deff = min(max((se / se_naive) ** 2, 1.0), per_doc)
    return ClusteredScore(d, n, score, se, se_naive, deff, n / deff)


@dataclass(frozen=True)
class PairedClustered:
    n_docs: int
    mean_a: float
    mean_b: float
    delta: float  # mean of per-document differences, B - A
    se: float | None
    z: float | None
    p: float  # two-sided
    method: str = "clustered paired test on per-document mean differences"

    def to_dict(self) -> dict[str, Any]:
        return {
            "n_docs": self.n_docs,
            "mean_a": self.mean_a,
            "mean_b": self.mean_b,
            "delta": self.delta,
            "se": self.se,
            "z": self.z,
            "p": self.p,
            "method": self.method,
        }


def paired_clustered(a: Groups, b: Groups) -> PairedClustered:
    """B against A over the documents both have samples of (each document's mean under each run)."""
    docs = [k for k in a if k in b and len(a[k]) and len(b[k])]
    if not docs:
        raise ValueError("no document has samples in both runs")
    ma = [sum(map(float, a[k])) / len(a[k]) for k in docs]
    mb = [sum(map(float, b[k])) / len(b[k]) for k in docs]
    diffs = [y - x for x, y in zip(ma, mb, strict=True)]
    n = len(docs)
    delta = sum(diffs) / n
    se = math.sqrt(_variance(diffs) / n) if n > 1 else None
    if se is None or se == 0.0:  # one document, or every document moved by the same amount
        z, p = None, (0.0 if se == 0.0 and delta != 0 else 1.0)
    else:
        z = delta / se
        p = 2.0 * NormalDist().cdf(-abs(z))
    return PairedClustered(n, sum(ma) / n, sum(mb) / n, delta, se, z, p)


def document_signs(a: Groups, b: Groups) -> list[int]:
    """Per document both runs have, in A's order: -1 when B's mean is below A's ("B worse"), +1 above, 0 equal."""
    out = []
    for k, xs in a.items():
        ys = b.get(k)
        if xs and ys:
            diff = sum(map(float, ys)) / len(ys) - sum(map(float, xs)) / len(xs)
            out.append((diff > 0) - (diff < 0))
    return out


def _variance(xs: Sequence[float]) -> float:
    n = len(xs)
    mean = sum(xs) / n
    return sum((x - mean) ** 2 for x in xs) / (n - 1)


def _num(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}"
