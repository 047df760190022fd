"""Rejection sampling (`--spec-sampling rejection`), as vLLM, SGLang and TensorRT-LLM verify drafts at temperature > 0
(shared/reference/sampling-at-temperature.md §1; Leviathan et al. 2023, Chen et al. 2023).

p is the target's sampling distribution at a row: `target_probs`, the plain sampler's own function (temperature, then
top-k, then top-p). A one-hot draft d is accepted with probability p(d); at the first rejection the token is drawn
from p with d removed, renormalised; after K accepts a bonus token is drawn from p. With drafts sampled from the draft
head's q (`rejection-q`), d is accepted with probability min(1, p(d) / q(d)) and the residual is norm(max(0, p - q)).
Either way each emitted token is distributed as p at its position, whatever the drafts were.

Randomness is streamed, as the real engines stream it: each request owns one generator seeded by its sampling seed
(`request_stream`), and every accept test and every draw takes the next numbers from it. A run is reproducible (the
same seeds and the same schedule give the same tokens), but a spec-dec run and a plain run with the same seed emit
different tokens, correctly: only the distribution is preserved (TensorRT-LLM issue #8285). The lossless gate for
that is evals/lossless/sampled.py.

The planted bugs of this path (workers/engine/faults.py) are the fields of `RejectionRule`; all off unless `--inject`
asks for one."""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass, replace

import torch

from ..config import SamplingParams
from ..engine.sampling import filter_logits, target_probs


def request_stream(seed: int) -> torch.Generator:
    """The random stream of one request, seeded by its sampling seed (hashed apart from the coupled sampler's keys)."""
    digest = hashlib.blake2b(struct.pack("<q", seed), digest_size=8, person=b"rejection").digest()
    return torch.Generator().manual_seed(int.from_bytes(digest, "little") & (2**63 - 1))


def uniform(stream: torch.Generator) -> float:
    """The stream's next number in [0, 1), in float64: float32 can draw exactly 0, and a draft of probability 0 would
    then be accepted (vLLM PR #23803)."""
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


@dataclass(frozen=True)
class RejectionRule:
    """The rule the verifier applies: the defaults are the textbook rule. Every other value is a planted bug of the
    rejection path (workers/engine/faults.py names each), set only when `--inject` asks for it."""

    greedy: bool = False  # rejection_greedy: verification takes the greedy branch at temperature > 0 (SGLang)
    residual_keeps_draft: bool = False  # residual_keeps_draft: after a rejection, the token is drawn from p itself
    accept_unit_temperature: bool = False  # accept_unit_temperature: the accept test reads p at temperature 1 (vLLM V0)
    swapped_filter_order: bool = False  # spec_filter_order: top-p on the whole distribution, then top-k (SGLang)
    accept_row_offset: int = 0  # accept_neighbour_row: 1, the accept test of draft i reads row i + 1
    restart_stream: bool = False  # restart_stream: the request's stream restarts from its seed at every step


CORRECT = RejectionRule()


def rejection_verify(
    logits: torch.Tensor,
    drafts: list[int],
    params: SamplingParams,
    stream: torch.Generator,
    draft_probs: torch.Tensor | None = None,
    rule: RejectionRule = CORRECT,
) -> list[int]:
    """logits [K+1, V] for positions [last, d_1..d_K]; drafts d_1..d_K; draft_probs [K, V]: q at each draft (None: the
    drafts are one-hot). Returns the emitted tokens: the accepted drafts, then the residual's draw at the first
    rejection (or the bonus token after K accepts). Length 1..K+1."""
    rows = logits.float().cpu()
    if rule.restart_stream:  # every step then reads the same numbers: each draw right alone, none independent
        stream.manual_seed(stream.initial_seed())
    if rule.greedy:
        from .verify import greedy_verify  # late: verify.py dispatches here

        return greedy_verify(rows, drafts)
    probs = _sampling_probs(rows, params, rule)
    accept_probs = probs
    if rule.accept_unit_temperature:
        accept_probs = _sampling_probs(rows, replace(params, temperature=1.0), rule)
    q = draft_probs.float().cpu() if draft_probs is not None else None
    emitted: list[int] = []
    for i, d in enumerate(drafts):
        p_d = float(accept_probs[min(i + rule.accept_row_offset, len(drafts)), d])
        q_d = 1.0 if q is None else float(q[i, d])
        if q_d > 0 and uniform(stream) < p_d / q_d:  # probability min(1, p(d) / q(d))
            emitted.append(d)
            continue
        emitted.append(sample_from(_residual(probs[i], d, None if q is None else q[i], rule), stream))
        return emitted
    emitted.append(sample_from(probs[len(drafts)], stream))
    return emitted


def _sampling_probs(rows: torch.Tensor, params: SamplingParams, rule: RejectionRule) -> torch.Tensor:
    """p at every row: the plain sampler's function, row by row (or the planted other filter order)."""
    if rule.swapped_filter_order:
        return _top_p_then_top_k(rows, params)
    return target_probs(rows, params)


def _residual(p: torch.Tensor, draft: int, q: torch.Tensor | None, rule: RejectionRule) -> torch.Tensor:
    """What the token after a rejected draft is drawn from: p without the draft (one-hot q), or max(0, p - q),
    renormalised. A residual with no mass left cannot follow a rejection (the accept probability was 1); p then."""
    if rule.residual_keeps_draft:
        return p
    residual = p.clone()
    if q is None:
        residual[draft] = 0.0
    else:
        residual = torch.clamp(residual - q, min=0.0)
    total = float(residual.sum())
    return residual / total if total > 0 else p


def _top_p_then_top_k(rows: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """The planted `spec_filter_order`: the nucleus of the whole temperature-scaled distribution, intersected with the
    top k (the plain sampler takes the nucleus of the top k, renormalised). Differs only when both are set."""
    keep = (filter_logits(rows, replace(params, top_k=0)) > float("-inf")) & (
        filter_logits(rows, replace(params, top_p=1.0)) > float("-inf")
    )
    return torch.softmax((rows / params.temperature).masked_fill(~keep, float("-inf")), -1)
