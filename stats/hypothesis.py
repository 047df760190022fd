"""The accuracy gate: a one-sided test of "this run is no worse than the reference" (TensorRT-LLM's formulas).

With the run's accuracy x' and the reference x, both on a 0-100 scale from n samples each with standard
deviation sigma (50 = the worst case of a Bernoulli score), the two-sample statistic is (x' - x) / sqrt(2 sigma^2/n):

    threshold = ref + z(alpha) * sqrt(2 sigma^2 / n)            (z = standard normal quantile; z(0.05) < 0)
    theta     = -(z(alpha) + z(beta)) * sqrt(2 sigma^2 / n)     (the smallest drop caught with power 1 - beta)

A run passes when its accuracy is at least the threshold. When the threshold is at or below the floor that a
broken model still reaches (0, or chance level for multiple choice), the gate cannot fail: we say so instead of
printing a PASS that means nothing (NO-GATE).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import NormalDist

_Z = NormalDist()


@dataclass
class HypothesisTest:
    ref_accuracy: float
    num_samples: int
    alpha: float = 0.05
    beta: float = 0.2
    sigma: float = 50.0
    higher_is_better: bool = True
    floor: float = 0.0  # what a model that answers nothing right still scores (chance level for 4 choices: 25)
    metric_name: str = "accuracy"
    theta: float = field(init=False)
    threshold: float = field(init=False)

    def __post_init__(self) -> None:
        if self.num_samples < 1:
            raise ValueError(f"a hypothesis test needs at least one sample, got {self.num_samples}")
        if not (0 < self.alpha < 1 and 0 < self.beta < 1):
            raise ValueError(f"alpha and beta must lie in (0, 1), got {self.alpha}, {self.beta}")
        scale = math.sqrt(2 * self.sigma**2 / self.num_samples)
        z_alpha, z_beta = _Z.inv_cdf(self.alpha), _Z.inv_cdf(self.beta)
        self.theta = -(z_alpha + z_beta) * scale
        sign = 1 if self.higher_is_better else -1
        self.threshold = self.ref_accuracy + sign * z_alpha * scale

    @property
    def can_fail(self) -> bool:
        """False when even a model at the floor would pass: the gate then carries no information."""
        if not self.higher_is_better:
            return True
        return self.threshold > self.floor

    @property
    def floor_warning(self) -> str:
        if self.floor > 0:
            return (
                f"threshold {self.threshold:.3f} is at or below chance level {self.floor:.3f}: a model answering at "
                "random passes this gate at this n; rely on the lossless gate"
            )
        return (
            f"threshold {self.threshold:.3f} is at or below the floor {self.floor:.3f}: this gate cannot fail at "
            "this n; rely on the lossless gate"
        )

    def passes(self, accuracy: float) -> bool:
        return accuracy >= self.threshold if self.higher_is_better else accuracy <= self.threshold

    def verdict(self, accuracy: float) -> str:
        """PASS / FAIL, or NO-GATE when the threshold is below the floor (a PASS there would mean nothing)."""
        if not self.passes(accuracy):
            return "FAIL"
        return "PASS" if self.can_fail else "NO-GATE"

    def report(self, accuracy: float | None = None) -> str:
        rule = "=" * 59
        name = self.metric_name
        lines = [
            rule,
            f"= {name.upper()} HYPOTHESIS TESTING",
            rule,
            f"Alpha (Type I:  False Positive): {self.alpha:.3f}",
            f"Beta  (Type II: False Negative): {self.beta:.3f}",
            f"Sigma (Standard deviation): {self.sigma:.3f}",
            f"#Samples: {self.num_samples}",
            f"Higher is better: {self.higher_is_better}",
            f"Theta (Minimum detectable effect): {self.theta:.3f}",
            f"Reference {name}: {self.ref_accuracy:.3f}",
            f"Threshold: {self.threshold:.3f}",
            rule,
        ]
        if accuracy is not None:
            lines += [f"Evaluated {name}: {accuracy:.3f}", f"Verdict: {self.verdict(accuracy)}", rule]
        if not self.can_fail:
            lines.append(self.floor_warning)
        return "\n".join(lines)
