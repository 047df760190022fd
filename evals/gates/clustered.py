"""The accuracy gate over several samples per document: TensorRT-LLM's test (hypothesis.py) with n the effective
sample count of the clustered score (results/clustered.py), n_eff = N D / deff.

With one sample per document n_eff = D and the gate is exactly the fixed-n one. With N samples per document the
score's variance is sd(per-document means)^2 / D, estimated from the run; the gate's formula keeps its worst-case
sigma (50) per sample and takes as n the count of independent samples that variance is worth: D when the samples of a
question always agree (repeats buy nothing), N D when they are as independent as different questions. As in
TensorRT-LLM's two-sample formula, the reference is taken as measured with the same precision as the run.
"""

from __future__ import annotations

from ...results.clustered import ClusteredScore
from .hypothesis import HypothesisTest
from .references import Reference


def clustered_hypothesis_test(reference: Reference, score: ClusteredScore, floor: float = 0.0) -> HypothesisTest:
    """The accuracy test of a run whose samples are clustered by document (an entry's own num_samples still wins)."""
    return reference.hypothesis_test(score.n_effective, floor)  # type: ignore[arg-type]  # a float count is fine


def clustered_note(score: ClusteredScore) -> str:
    """What the gate's report adds under a clustered run: where its n came from."""
    return (
        f"n = {score.n_effective:.1f} effective samples: {score.n_docs} documents x {score.repeats:g} samples, "
        f"clustered by document (design effect {score.design_effect:.2f}; standard error "
        f"{score.se if score.se is not None else float('nan'):.2f} from the per-document means)"
    )
