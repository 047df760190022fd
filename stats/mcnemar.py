"""The exact McNemar test: are the pairs one side alone got right more than chance would give the other? Used where
two runs answered the same documents once each (a lossless verdict's divergent pairs, `compare`)."""

from __future__ import annotations


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value: min(1, 2 * P[X <= min(b, c)]) with X ~ Bin(b + c, 1/2); 1.0 if b + c == 0.

    b: pairs that A got right and B wrong; c: pairs that A got wrong and B right. This is scipy's exact binomial
    test of min(b, c) successes in b + c trials at p = 1/2 (for a symmetric distribution its two-sided p-value,
    the outcomes no likelier than the one observed, is twice the smaller tail).
    """
    if b < 0 or c < 0:
        raise ValueError(f"discordant counts cannot be negative: b={b}, c={c}")
    if b + c == 0:
        return 1.0
    from scipy.stats import binomtest

    return float(binomtest(min(b, c), b + c, 0.5, alternative="two-sided").pvalue)
