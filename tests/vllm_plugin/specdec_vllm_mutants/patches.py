"""The wrappers that plant each class into vLLM (0.32's v1 engine), each at the narrowest point that owns the
behaviour, and each calling vLLM's own code unchanged whenever its class is not the live one."""

from __future__ import annotations

import dataclasses
import functools

import torch
from vllm.logger import init_logger
from vllm.v1.sample import rejection_sampler as rs
from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer
from vllm.v1.spec_decode.ngram_proposer import NgramProposer

from . import Selection
from .edits import ROW_EDITS, edit_row, never_matching

logger = init_logger("vllm.specdec_vllm_mutants")
MARK = "_specdec_planted"


class Firing:
    """Logs the first time each class fires after it became live (one line per class, not per step)."""

    def __init__(self) -> None:
        self.logged: set[str] = set()

    def fired(self, name: str) -> None:
        if name not in self.logged:
            self.logged.add(name)
            logger.warning("specdec-eval planted class %s fired", name)

    def first(self, name: str) -> bool:
        """True once per class: the step a one-shot class acts in."""
        if name in self.logged:
            return False
        self.fired(name)
        return True


def install(selection: Selection) -> None:
    if getattr(rs, MARK, False):  # vLLM may load plugins again in the same process
        return
    setattr(rs, MARK, True)
    firing = Firing()
    _plant_row_edits(selection, firing)
    _plant_bonus_row(selection, firing)
    for proposer in (SpecDecodeBaseProposer, NgramProposer):
        _plant_in_proposer(proposer, selection, firing)
    logger.warning("specdec-eval planted-bug plugin active (%s)", selection.file or selection.fixed)


def _plant_row_edits(selection: Selection, firing: Firing) -> None:
    """`rejection_sample` is the one function that decides which tokens a step emits; editing its result there
    (not the forward's) keeps the logprobs vLLM computes afterwards consistent with the edited tokens."""
    original = rs.rejection_sample

    @functools.wraps(original)
    def rejection_sample(draft_token_ids, num_draft_tokens, max_spec_len, cu_num_draft_tokens, *args, **kwargs):
        output = original(draft_token_ids, num_draft_tokens, max_spec_len, cu_num_draft_tokens, *args, **kwargs)
        name = selection.current()
        if name not in ROW_EDITS:
            return output
        edited = _edited(name, output, draft_token_ids.tolist(), num_draft_tokens)
        if not torch.equal(edited, output):
            firing.fired(name)
        return edited

    rs.rejection_sample = rejection_sample


def _edited(name: str, output: torch.Tensor, drafts: list[int], num_draft_tokens: list[int]) -> torch.Tensor:
    edited = torch.full_like(output, rs.PLACEHOLDER_TOKEN_ID)
    start = 0
    for i, (row, n) in enumerate(zip(output.tolist(), num_draft_tokens, strict=True)):
        valid = [t for t in row if t != rs.PLACEHOLDER_TOKEN_ID]
        new = edit_row(name, valid, drafts[start : start + n])
        start += n
        edited[i, : len(new)] = torch.tensor(new, dtype=output.dtype)
    return edited


def _plant_bonus_row(selection: Selection, firing: Firing) -> None:
    """The bonus token is sampled in the forward from `logits[bonus_logits_indices]`: the class hands it indices
    one row early (the last draft's verify row, or the previous request's row), logprobs included."""
    original = rs.RejectionSampler.forward

    @functools.wraps(original)
    def forward(self, metadata, draft_probs, logits, sampling_metadata):
        if selection.current() == "bonus_wrong_row":
            firing.fired("bonus_wrong_row")
            metadata = dataclasses.replace(metadata, bonus_logits_indices=metadata.bonus_logits_indices - 1)
        return original(self, metadata, draft_probs, logits, sampling_metadata)

    rs.RejectionSampler.forward = forward


def _plant_in_proposer(cls: type, selection: Selection, firing: Firing) -> None:
    """The proposer's `propose` is where drafts come from: Eagle's (a [requests, K] tensor) and n-gram's (lists).
    draft_never_matches moves every draft off by one token id; oom_first_spec_step lets the first propose after the
    class went live advance the drafter's state (its KV and buffers for this step), then raises the out-of-memory
    error a larger draft pass would, before the runner has taken the drafts: vLLM handles none there."""
    original = cls.propose

    @functools.wraps(original)
    def propose(self, *args, **kwargs):
        drafts = original(self, *args, **kwargs)
        name = selection.current()
        if name == "draft_never_matches":
            firing.fired(name)
            if isinstance(drafts, torch.Tensor):
                return torch.where(drafts > 0, drafts - 1, torch.ones_like(drafts))
            return [never_matching(row) for row in drafts]
        if name == "oom_first_spec_step" and firing.first(name):
            raise torch.OutOfMemoryError(
                "out of memory: tried to allocate 96.00 MiB for the draft pass (planted by specdec-eval)"
            )
        return drafts

    cls.propose = propose
