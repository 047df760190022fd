"""recovered_residual_argmax: at a rejection, the token emitted in the rejected draft's place is the residual's most
likely token instead of a draw from the residual norm(max(0, p - q)) (with one-hot drafts: p without the draft).
Accepts and bonus tokens stay right; only the draws after a rejection are greedy, so the output-level tests see it
diluted by every accepted draft and every bonus token (a third to a half of the positions come after a rejection at
SmolLM2's acceptance), while the direct test of the tokens emitted at rejections (where the run knows its drafts)
sees every one of them at u below the top token's residual mass. The sampled lossless gate must FAIL it.

A class declared in its own module: this file is all it takes (the registry finds CLASS; the planted verifier runs
its `rejection_verify` on every request verified by rejection sampling)."""

from __future__ import annotations

from typing import Any

from .declaration import LOSSLESS, PlantedClass

NAME = "recovered_residual_argmax"


def _rejection_verify(
    sampler: Any, logits: Any, drafts: list[int], params: Any, stream: Any, draft_probs: Any
) -> list[int]:
    """The textbook accept tests from the request's stream; at the first rejection, the residual's argmax."""
    target_probs, residual, sample_from, uniform = (
        sampler.target_probs,
        sampler.residual,
        sampler.sample_from,
        sampler.uniform,
    )
    probs = target_probs(logits.float().cpu(), params)
    q = draft_probs.float().cpu() if draft_probs is not None else None
    emitted: list[int] = []
    for i, d in enumerate(drafts):
        q_d = 1.0 if q is None else float(q[i, d])
        if q_d > 0 and uniform(stream) < float(probs[i, d]) / q_d:
            emitted.append(d)
            continue
        emitted.append(int(residual(probs[i], d, None if q is None else q[i]).argmax()))
        return emitted
    emitted.append(sample_from(probs[len(drafts)], stream))
    return emitted


CLASS = PlantedClass(
    NAME,
    ("verifier", "rejection_sampler"),
    LOSSLESS,
    "after a rejection the residual's most likely token is emitted instead of a draw from the residual",
    sampled=True,
    spec_sampling="rejection",
    rejection_verify=_rejection_verify,
)
