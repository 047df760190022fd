"""The planted bugs of the rejection sampler (the sampled classes), as a rule the substitute verifier applies in place
of the textbook one. Each is invisible to any greedy check and caught by the sampled lossless gate:
  rejection_greedy        verification silently takes the greedy branch at temperature > 0 (SGLang on ROCm / NPU)
  residual_keeps_draft    after a rejection the token is drawn from p itself, the rejected draft left in the residual
  accept_unit_temperature the accept test reads the target's probabilities at temperature 1 while the plain sampler
                          uses T (vLLM V0); fires only at temperature != 1
  spec_filter_order       the spec path takes the nucleus of the whole distribution, then the top k; the plain sampler
                          the nucleus of the top k (SGLang); fires only with both top-k and top-p set
  accept_neighbour_row    the accept test of draft i reads row i + 1's probability of it
  restart_stream          the request's random stream restarts from its seed at every verification step: each draw
                          is distributed right alone while a request's accept decisions become fixed thresholds
  a class of its own      its module's `rejection_verify` (`bug_classes`), in place of the textbook verification
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from types import SimpleNamespace

import torch

from .. import bug_classes
from ..config import SamplingParams
from ..sampling.keyed import filter_logits, target_probs
from ..sampling.rejection import rejection_verify, residual, sample_from, uniform
from ..sampling.verify import greedy_verify

# What a class declared in its own module draws with (handed to its `rejection_verify`; see bug_classes.declaration).
SAMPLER = SimpleNamespace(
    target_probs=target_probs,
    residual=residual,
    sample_from=sample_from,
    uniform=uniform,
    rejection_verify=rejection_verify,
)


@dataclass(frozen=True)
class RejectionRule:
    """The rule a planted verifier applies: the defaults are the textbook rule, every other value a planted bug."""

    greedy: bool = False  # rejection_greedy
    residual_keeps_draft: bool = False  # residual_keeps_draft
    accept_unit_temperature: bool = False  # accept_unit_temperature
    swapped_filter_order: bool = False  # spec_filter_order
    accept_row_offset: int = 0  # accept_neighbour_row: 1
    restart_stream: bool = False  # restart_stream
    own: str | None = None  # a class declared in its own module with a `rejection_verify`: its name


CORRECT = RejectionRule()


def planted_rule(points: Sequence[str]) -> RejectionRule:
    """The rejection rule with these sampled classes planted."""
    return RejectionRule(
        greedy="rejection_greedy" in points,
        residual_keeps_draft="residual_keeps_draft" in points,
        accept_unit_temperature="accept_unit_temperature" in points,
        swapped_filter_order="spec_filter_order" in points,
        accept_row_offset=int("accept_neighbour_row" in points),
        restart_stream="restart_stream" in points,
        own=next((p for p in points if _own_verify(p) is not None), None),
    )


def _own_verify(point: str):
    declared = bug_classes.BY_NAME.get(point)
    return declared.rejection_verify if declared is not None else None


def can_change(point: str, params: SamplingParams) -> bool:
    """Whether a sampled class can change anything for a request sampled with `params` (a bug that cannot is not
    said to fire: accept_unit_temperature at temperature 1, spec_filter_order without both filters)."""
    if point == "accept_unit_temperature":
        return params.temperature != 1.0
    if point == "spec_filter_order":
        return params.top_k > 0 and params.top_p < 1.0
    return True


def ruled_rejection_verify(
    logits: torch.Tensor,
    drafts: list[int],
    params: SamplingParams,
    stream: torch.Generator,
    draft_probs: torch.Tensor | None = None,
    rule: RejectionRule = CORRECT,
) -> list[int]:
    """Rejection sampling as the clean sampler does it, with `rule`'s bugs planted (CORRECT: the same tokens as the
    clean sampler from the same stream)."""
    if rule.own is not None:
        return _own_verify(rule.own)(SAMPLER, logits, drafts, params, stream, draft_probs)
    rows = logits.float().cpu()
    if rule.restart_stream:  # every step then reads the same numbers: each draw right alone, none independent
        stream.manual_seed(stream.initial_seed())
    if rule.greedy:
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
        if q_d > 0 and uniform(stream) < p_d / q_d:
            emitted.append(d)
            continue
        rest = probs[i] if rule.residual_keeps_draft else residual(probs[i], d, None if q is None else q[i])
        emitted.append(sample_from(rest, stream))
        return emitted
    emitted.append(sample_from(probs[len(drafts)], stream))
    return emitted


def _sampling_probs(rows: torch.Tensor, params: SamplingParams, rule: RejectionRule) -> torch.Tensor:
    """p at every row: the plain sampler's function, or the planted other filter order."""
    if not rule.swapped_filter_order:
        return target_probs(rows, params)
    # the nucleus of the whole temperature-scaled distribution, intersected with the top k
    keep = (filter_logits(rows, replace(params, top_k=0)) > float("-inf")) & (
        filter_logits(rows, replace(params, top_p=1.0)) > float("-inf")
    )
    return torch.softmax((rows / params.temperature).masked_fill(~keep, float("-inf")), -1)
