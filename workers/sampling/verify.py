"""Verification as pure functions: given the target's logits over [last, d_1..d_K] and the draft tokens, how
many drafts are accepted and which token follows. Plain decoding is K = 0: no drafts, one token.

Greedy: a draft is accepted while it equals the target's argmax. Sampling: rejection sampling against a one-hot
(argmax) draft, realised by coupling: the token at each position is the keyed sample of the target distribution
(`keyed`), and a draft is accepted exactly when it equals that sample. A draft d is then accepted with
probability p(d), and after a rejection the emitted token is distributed as p without d, renormalised: the
textbook rule for a one-hot draft, so the target distribution is unchanged; and because the sample at a position
does not depend on the draft, a spec-dec run emits exactly the tokens a plain run of the same seed samples.

A request of an engine with `--spec-sampling rejection` carries its own random stream instead (Request.stream):
it is verified by rejection sampling with streamed randomness, as the real engines do (`rejection`).

`Verifier` applies this to every request of a step; a planted bug of verification is a substitute Verifier, chosen
when the engine is built, so this path carries no bug flags."""

from __future__ import annotations

import torch

from ..config import SamplingParams
from ..model.parallel import TPGroup
from .keyed import keyed_sample
from .rejection import rejection_verify


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


def sampled_verify(
    logits: torch.Tensor, drafts: list[int], params: SamplingParams, seed: int, position: int
) -> list[int]:
    """Like greedy_verify with the keyed samples in place of the argmax. `position`: the output position the first
    row decides (each later row decides the next)."""
    emitted: list[int] = []
    for i, d in enumerate(drafts):
        emitted.append(keyed_sample(logits[i], params, seed, position + i))
        if emitted[-1] != d:
            return emitted
    emitted.append(keyed_sample(logits[len(drafts)], params, seed, position + len(drafts)))
    return emitted


def verify(
    logits: torch.Tensor,
    drafts: list[int],
    params: SamplingParams,
    seed: int | None,
    position: int = 0,
    stream: torch.Generator | None = None,
    draft_probs: torch.Tensor | None = None,
) -> list[int]:
    """seed: the request's sampling seed (None for greedy requests); stream: its random stream under rejection
    sampling (None: the coupled, keyed sampler); draft_probs: rejection sampling's q."""
    if params.greedy:
        return greedy_verify(logits, drafts)
    if stream is not None:
        return rejection_verify(logits, drafts, params, stream, draft_probs)
    return sampled_verify(logits, drafts, params, seed, position)


class Verifier:
    """Verifies every scheduled request of a step. `logits` holds, in batch order, one row per context request (its
    last token) and 1 + K rows per generation request ([last, d_1..d_K]; K = 0 without spec-dec). Rank 0 decides;
    every rank receives the same emitted tokens (never decide per rank under TP; the random streams of rejection
    sampling advance on rank 0 only)."""

    def __call__(self, items, logits: torch.Tensor, tp: TPGroup, step: int) -> list[list[int]]:
        width = 1 + max(1 if item.is_context else item.num_new_tokens for item in items)
        packed = torch.full((len(items), width), -1, dtype=torch.int64, device=logits.device)
        if tp.is_leader:
            row = 0
            for r, item in enumerate(items):
                n_rows = 1 if item.is_context else item.num_new_tokens
                drafts = [] if item.is_context else item.request.draft_tokens[: n_rows - 1]
                out = self.verify_request(r, item, logits[row : row + n_rows], drafts)
                packed[r, 0] = len(out)
                packed[r, 1 : 1 + len(out)] = torch.tensor(out)
                row += n_rows
        packed = tp.broadcast(packed).tolist()
        return [p[1 : 1 + p[0]] for p in packed]

    def verify_request(self, r: int, item, rows: torch.Tensor, drafts: list[int]) -> list[int]:
        """The emitted tokens of the r-th request of the step, from its rows of logits and its drafts."""
        req = item.request
        q = req.draft_probs[: len(drafts)] if req.draft_probs is not None and drafts else None
        return verify(rows, drafts, req.sampling, req.seed, len(req.output_token_ids), req.stream, q)
