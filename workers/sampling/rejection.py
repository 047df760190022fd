"""Rejection sampling (`--spec-sampling rejection`), as vLLM, SGLang and TensorRT-LLM verify drafts at temperature > 0
(Leviathan et al. 2023, Chen et al. 2023).

p is the target's sampling distribution at a row: `target_probs`, the plain sampler's own function (temperature, then
top-k, then top-p). A one-hot draft d is accepted with probability p(d); at the first rejection the token is drawn
from p with d removed, renormalised; after K accepts a bonus token is drawn from p. With drafts sampled from the draft
head's q (`rejection-q`), d is accepted with probability min(1, p(d) / q(d)) and the residual is norm(max(0, p - q)).
Either way each emitted token is distributed as p at its position, whatever the drafts were.

Randomness is streamed, as the real engines stream it: each request owns one generator seeded by its sampling seed
(`request_stream`), and every accept test and every draw takes the next numbers from it. A run is reproducible (the
same seeds and the same schedule give the same tokens), but a spec-dec run and a plain run with the same seed emit
different tokens, correctly: only the distribution is preserved; the sampled lossless gate checks that.

This is the textbook rule only; its planted bugs are a substitute verifier the engine builds when `--inject` asks."""

from __future__ import annotations

import hashlib
import struct

import torch

from ..config import SamplingParams
from .keyed import target_probs


def request_stream(seed: int) -> torch.Generator:
    """The random stream of one request, seeded by its sampling seed (hashed apart from the coupled sampler's keys)."""
    digest = hashlib.blake2b(struct.pack("<q", seed), digest_size=8, person=b"rejection").digest()
    return torch.Generator().manual_seed(int.from_bytes(digest, "little") & (2**63 - 1))


def uniform(stream: torch.Generator) -> float:
    """The stream's next number in [0, 1), in float64: float32 can draw exactly 0, and a draft of probability 0 would
    then be accepted (a bug vLLM fixed)."""
    return float(torch.rand((), generator=stream, dtype=torch.float64))


def sample_from(probs: torch.Tensor, stream: torch.Generator) -> int:
    """One draw from `probs` ([V], any non-negative weights; normalised here) by the inverse of its cumulative sum in
    float64. A token of probability 0 is never drawn."""
    cdf = probs.double().cumsum(0)
    x = torch.tensor([uniform(stream) * float(cdf[-1])], dtype=torch.float64)
    index = int(torch.searchsorted(cdf, x, right=True))
    if index >= len(cdf) or probs[index] <= 0:  # u * total rounded up to the total: the last token with any mass
        index = int(torch.nonzero(probs > 0)[-1])
    return index


def rejection_verify(
    logits: torch.Tensor,
    drafts: list[int],
    params: SamplingParams,
    stream: torch.Generator,
    draft_probs: torch.Tensor | None = None,
) -> list[int]:
    """logits [K+1, V] for positions [last, d_1..d_K]; drafts d_1..d_K; draft_probs [K, V]: q at each draft (None: the
    drafts are one-hot). Returns the emitted tokens: the accepted drafts, then the residual's draw at the first
    rejection (or the bonus token after K accepts). Length 1..K+1."""
    rows = logits.float().cpu()
    probs = target_probs(rows, params)
    q = draft_probs.float().cpu() if draft_probs is not None else None
    emitted: list[int] = []
    for i, d in enumerate(drafts):
        q_d = 1.0 if q is None else float(q[i, d])
        if q_d > 0 and uniform(stream) < float(probs[i, d]) / q_d:  # probability min(1, p(d) / q(d))
            emitted.append(d)
            continue
        emitted.append(sample_from(residual(probs[i], d, None if q is None else q[i]), stream))
        return emitted
    emitted.append(sample_from(probs[len(drafts)], stream))
    return emitted


def residual(p: torch.Tensor, draft: int, q: torch.Tensor | None) -> torch.Tensor:
    """What the token after a rejected draft is drawn from: p without the draft (one-hot q), or max(0, p - q),
    renormalised. A residual with no mass left cannot follow a rejection (the accept probability was 1); p then."""
    rest = p.clone()
    if q is None:
        rest[draft] = 0.0
    else:
        rest = torch.clamp(rest - q, min=0.0)
    total = float(rest.sum())
    return rest / total if total > 0 else p
