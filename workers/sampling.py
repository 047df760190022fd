"""Choosing the next token from logits: greedy, or temperature with top-k / top-p, one seeded generator per
request so a request's samples do not depend on what else is in the batch."""

from __future__ import annotations

import torch

from .config import SamplingParams


def filter_logits(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Temperature, then top-k, then top-p (nucleus), as Hugging Face orders them. logits: [V] float32."""
    logits = logits / params.temperature
    if params.top_k and params.top_k < logits.shape[-1]:
        kth = torch.topk(logits, params.top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if params.top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True)
        cumulative = torch.softmax(sorted_logits, -1).cumsum(-1)
        # Drop a token when the mass before it already reaches top_p; the first token always stays.
        drop_sorted = (cumulative - torch.softmax(sorted_logits, -1)) >= params.top_p
        logits = logits.masked_fill(drop_sorted.scatter(0, order, drop_sorted), float("-inf"))
    return logits


def target_probs(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """The distribution a non-speculative sampler draws from (used by rejection sampling too)."""
    return torch.softmax(filter_logits(logits, params), -1)


def sample_tokens(
    logits: torch.Tensor, params: list[SamplingParams], generators: list[torch.Generator | None]
) -> torch.Tensor:
    """logits [B, V] -> token ids [B] (int64, on the logits' device)."""
    tokens = torch.argmax(logits, dim=-1)
    for i, p in enumerate(params):
        if not p.greedy:
            probs = target_probs(logits[i], p)
            tokens[i] = torch.multinomial(probs.cpu(), 1, generator=generators[i]).item()
    return tokens
