"""Choosing the next token from logits: greedy, or temperature with top-k / top-p.

Randomness is keyed, not streamed: the token at output position p is argmax(probs / E) with E exponential noise
drawn from a generator seeded by (the request's seed, p) (the exponential-race form of the Gumbel-max trick, an
exact sample of `probs`). So a request's samples depend neither on what else is in the batch nor on how often a
step was retried, recomputed after preemption, or split into speculative steps: the token at a position is the same
however it was reached, and a recovered fault changes nothing.
"""

from __future__ import annotations

import hashlib
import struct

import torch

from ..config import SamplingParams


def draw_generator(seed: int, position: int) -> torch.Generator:
    """The generator of the draw at one output position: the same (seed, position) always gives the same noise."""
    digest = hashlib.blake2b(struct.pack("<qq", seed, position), digest_size=8).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest, "little") & (2**63 - 1))


def keyed_sample(logits: torch.Tensor, params: SamplingParams, seed: int, position: int) -> int:
    """The token at output `position`: an exact sample of target_probs(logits), determined by (seed, position)."""
    probs = target_probs(logits.float().cpu(), params)
    noise = torch.empty_like(probs).exponential_(generator=draw_generator(seed, position))
    return int(torch.argmax(probs / noise))


def filter_logits(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Temperature, then top-k, then top-p (nucleus), as Hugging Face orders them. logits: [V] float32, or [..., V]
    (each row filtered alone, exactly as it would be alone: the teacher-forced scoring pass filters every position
    of an output at once with this same function)."""
    logits = logits / params.temperature
    if params.top_k and params.top_k < logits.shape[-1]:
        kth = torch.topk(logits, params.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if params.top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        sorted_probs = torch.softmax(sorted_logits, -1)
        # Drop a token when the mass before it already reaches top_p; the first token always stays.
        drop_sorted = (sorted_probs.cumsum(-1) - sorted_probs) >= params.top_p
        logits = logits.masked_fill(drop_sorted.scatter(-1, order, drop_sorted), float("-inf"))
    return logits


def target_probs(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """The distribution a non-speculative sampler draws from (used by rejection sampling too)."""
    return torch.softmax(filter_logits(logits, params), -1)


# One output token's record: [its log-probability, [[id, log-probability] of the top alternatives, best first]].
TokenLogprob = list


def token_logprobs(rows: torch.Tensor, tokens: list[int], k: int) -> list[TokenLogprob]:
    """The log-probabilities (log-softmax of the raw logits, before temperature or filters: what the model said)
    of `tokens`, token i read from row i, each with the top k alternatives. rows: [len(tokens), V]. No forward of
    its own and no effect on which token was chosen: only what the lossless gate's margins and an OpenAI client's
    `logprobs` need."""
    logp = torch.log_softmax(rows.float(), dim=-1)
    own = logp.gather(-1, torch.tensor(tokens, device=logp.device).unsqueeze(-1)).squeeze(-1).tolist()
    if k:
        values, ids = torch.topk(logp, k, dim=-1)
        tops = [
            [[i, round(v, 5)] for i, v in zip(r_ids, r_vals, strict=True)]
            for r_ids, r_vals in zip(ids.tolist(), values.tolist(), strict=True)
        ]
    else:
        tops = [[] for _ in tokens]
    return [[round(lp, 5), top] for lp, top in zip(own, tops, strict=True)]


def step_logprobs(items, logits: torch.Tensor, emitted: list[list[int]]) -> list[list[TokenLogprob] | None]:
    """Per scheduled request of a step, the records of its emitted tokens (None where its request asked for none).
    The rows are laid out as verification reads them: one per context request, 1 + K per
    generation request; emitted token i of a request was decided by its row i."""
    out: list[list[TokenLogprob] | None] = []
    row = 0
    for item, tokens in zip(items, emitted, strict=True):
        k = item.request.sampling.logprobs
        out.append(None if k is None else token_logprobs(logits[row : row + len(tokens)], tokens, k))
        row += 1 if item.is_context else item.num_new_tokens
    return out
