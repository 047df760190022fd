"""uniforms_fixed_per_request: the rejection sampler takes its uniforms from a stream seeded anew at every
verification step from a value fixed per request (here: its own stream's seed, hashed with the step's purpose),
as a sampler does that keys its randomness by (request, row of the step) instead of by output position. Every
step then reads the same numbers: the k-th draft of every step is accepted when p(d) exceeds the same threshold,
and every token drawn at a rejection or as the bonus sits at the same quantile of its distribution. Each draw is
distributed right alone; a request's draws are not independent, so a request with a low threshold over-draws its
drafts (the likely tokens) all along, and one with a high threshold under-draws them. The sibling of
`restart_stream` (which restarts the request's own stream), from another seed, so a check tuned to that one seed's
numbers does not catch it by luck; the sampled lossless gate must FAIL it by the within-request tests (weighted by
the likelihood's scale) and, where the run knows its drafts, by the accept decisions within requests.

A class declared in its own module: this file is all it takes (the registry finds CLASS; the planted verifier runs
its `rejection_verify` on every request verified by rejection sampling)."""

from __future__ import annotations

import hashlib
import struct
from typing import Any

from .declaration import LOSSLESS, PlantedClass

NAME = "uniforms_fixed_per_request"


def fixed_seed(stream_seed: int) -> int:
    """The per-request value every step's stream is seeded from (another than the request stream's own)."""
    digest = hashlib.blake2b(struct.pack("<Q", stream_seed & (2**64 - 1)), digest_size=8, person=b"fixed-u").digest()
    return int.from_bytes(digest, "little") & (2**63 - 1)


def _rejection_verify(
    sampler: Any, logits: Any, drafts: list[int], params: Any, stream: Any, draft_probs: Any
) -> list[int]:
    """The textbook verification, from a stream seeded by the request's fixed value at every step (the request's
    own stream is left where it was: nothing else reads it)."""
    import torch

    fresh = torch.Generator().manual_seed(fixed_seed(stream.initial_seed()))
    return sampler.rejection_verify(logits, drafts, params, fresh, draft_probs)


CLASS = PlantedClass(
    NAME,
    ("verifier", "rejection_sampler"),
    LOSSLESS,
    "the rejection sampler's uniforms are the same at every step of a request (keyed by request and row)",
    sampled=True,
    spec_sampling="rejection",
    rejection_verify=_rejection_verify,
)
