"""Verification as pure functions: given the target's logits over [last, d_1..d_K] and the draft tokens, how
many drafts are accepted and which token follows. Greedy is exact; sampling is rejection sampling against a
one-hot (argmax) draft, which leaves the target distribution unchanged."""

from __future__ import annotations

import torch

from ..config import SamplingParams
from ..parallel import TPGroup
from ..sampling import target_probs


def greedy_verify(logits: torch.Tensor, drafts: list[int]) -> list[int]:
    """logits [K+1, V] for positions [last, d_1..d_K]. Returns the emitted tokens: the accepted drafts, then the
    target's own token at the first mismatch (or the bonus token after K accepts). Length 1..K+1."""
    targets = torch.argmax(logits, dim=-1).tolist()
    emitted: list[int] = []
    for i, d in enumerate(drafts):
        if d != targets[i]:
            break
        emitted.append(d)
    emitted.append(targets[len(emitted)])
    return emitted


def rejection_verify(
    logits: torch.Tensor, drafts: list[int], params: SamplingParams, generator: torch.Generator | None
) -> list[int]:
    """Accept draft d_i with probability p_i(d_i) (the draft proposed it with probability 1); on rejection draw
    from p_i with d_i removed and renormalised; after K accepts draw the bonus from p_K."""
    emitted: list[int] = []
    for i, d in enumerate(drafts):
        p = target_probs(logits[i].cpu(), params)
        u = torch.rand((), generator=generator).item()
        if u < p[d].item():
            emitted.append(d)
            continue
        residual = p.clone()
        residual[d] = 0.0
        emitted.append(int(torch.multinomial(residual / residual.sum(), 1, generator=generator).item()))
        return emitted
    bonus = target_probs(logits[len(drafts)].cpu(), params)
    emitted.append(int(torch.multinomial(bonus, 1, generator=generator).item()))
    return emitted


def verify(
    logits: torch.Tensor, drafts: list[int], params: SamplingParams, generator: torch.Generator | None
) -> list[int]:
    if params.greedy:
        return greedy_verify(logits, drafts)
    return rejection_verify(logits, drafts, params, generator)


def verify_batch(items, logits: torch.Tensor, tp: TPGroup) -> list[list[int]]:
    """Verify every scheduled request of a step. `logits` holds, in batch order, one row per context request (its
    last token) and 1 + K rows per generation request ([last, d_1..d_K]; K = 0 without spec-dec). Rank 0 decides;
    every rank receives the same emitted tokens (never decide per rank under TP)."""
    width = 1 + max(1 if item.is_context else item.num_new_tokens for item in items)
    packed = torch.full((len(items), width), -1, dtype=torch.int64, device=logits.device)
    if tp.is_leader:
        row = 0
        for r, item in enumerate(items):
            req = item.request
            n_rows = 1 if item.is_context else item.num_new_tokens
            drafts = [] if item.is_context else req.draft_tokens[: n_rows - 1]
            out = verify(logits[row : row + n_rows], drafts, req.sampling, req.generator)
            packed[r, 0] = len(out)
            packed[r, 1 : 1 + len(out)] = torch.tensor(out)
            row += n_rows
    packed = tp.broadcast(packed).tolist()
    return [p[1 : 1 + p[0]] for p in packed]
