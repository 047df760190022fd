"""A substitute verifier with the verification-side planted bugs built in:
  emit_rejected_draft   verification emits a rejected first draft in place of the target's token (once, or xCOUNT)
  accept_off_by_one     one draft more is accepted than verified: the first rejected draft is emitted as accepted,
                        followed by the target's token after it (KV and counters stay consistent with the lie)
  rewind_keeps_rejected (its first half) the KV of a rejected draft is kept as committed: where the target's own
                        token replaced a rejected draft, the cache holds the draft's KV (the target wrapper feeds it)
  sample_key_shift      at temperature > 0 the spec path samples output position p with position p+1's key
                        (sampling is keyed by (seed, output position)); greedy is unaffected
  a class of its own     its module's `after_verify` edit of the verified tokens (`bug_classes`)
  the sampled classes   the rejection sampler's bugs (`rejection` here), on a request verifying drafts at
                        temperature > 0 with its own random stream, where the bug can change anything
Each fires only when asked and on its own path, and is recorded once per engine step it fired in.
"""

from __future__ import annotations

import torch

from .. import bug_classes
from ..faults import REJECTION_POINTS, FaultInjector
from ..model.parallel import TPGroup
from ..sampling.verify import Verifier, greedy_verify, sampled_verify, verify
from .rejection import CORRECT, RejectionRule, can_change, planted_rule, ruled_rejection_verify
from .target import KeptDrafts


class PlantedVerifier(Verifier):
    def __init__(self, faults: FaultInjector, kept: KeptDrafts) -> None:
        self.faults = faults
        self.kept = kept  # rewind_keeps_rejected: read by the target wrapper at the next step
        self._shift: list[int] | None = None
        self._rules: list[RejectionRule] | None = None

    def __call__(self, items, logits: torch.Tensor, tp: TPGroup, step: int) -> list[list[int]]:
        self._shift = self._key_shift(items, step)
        self._rules = self._rejection_rules(items, step)
        emitted = super().__call__(items, logits, tp, step)
        return self._after_verify(items, logits, emitted, step)

    def verify_request(self, r: int, item, rows: torch.Tensor, drafts: list[int]) -> list[int]:
        req = item.request
        if req.sampling.greedy:
            return greedy_verify(rows, drafts)
        q = req.draft_probs[: len(drafts)] if req.draft_probs is not None and drafts else None
        if req.stream is not None:
            rule = self._rules[r] if self._rules else CORRECT
            return ruled_rejection_verify(rows, drafts, req.sampling, req.stream, q, rule)
        position = len(req.output_token_ids) + (self._shift[r] if self._shift else 0)
        return sampled_verify(rows, drafts, req.sampling, req.seed, position)

    def _asked(self, point: str) -> bool:
        return self.faults.wants(point)

    def _key_shift(self, items, step: int) -> list[int] | None:
        """sample_key_shift: the key offset of each request's sampled verification (None: no shift anywhere)."""
        if not self._asked("sample_key_shift"):
            return None
        shift = [int(not it.is_context and _width(it) > 1 and not it.request.sampling.greedy) for it in items]
        return shift if any(shift) and self.faults.due("sample_key_shift", step) else None

    def _rejection_rules(self, items, step: int) -> list[RejectionRule] | None:
        """The sampled classes: per request, the rule with the asked bugs set where their path is taken; None when
        none fires in this step."""
        asked = [p for p in REJECTION_POINTS if self._asked(p)]
        if not asked:
            return None
        wanted = [
            [p for p in asked if _on_rejection_path(item) and can_change(p, item.request.sampling)] for item in items
        ]
        firing = {p for points in wanted for p in points}
        firing = {p for p in firing if self.faults.due(p, step)}  # recorded once per step each
        if not firing:
            return None
        return [planted_rule([p for p in points if p in firing]) for points in wanted]

    def _after_verify(self, items, logits: torch.Tensor, emitted: list[list[int]], step: int) -> list[list[int]]:
        if self._asked("emit_rejected_draft"):
            emitted = _emit_rejected_draft(items, emitted, self.faults, step)
        if self._asked("accept_off_by_one"):
            emitted = self._accept_one_more(items, logits, emitted, step)
        if self._asked("rewind_keeps_rejected"):
            for item, tokens in zip(items, emitted, strict=True):
                drafts = item.request.draft_tokens[: _width(item) - 1]
                rejected = not item.is_context and len(tokens) <= len(drafts)  # the target replaced a draft
                if rejected and self.faults.due("rewind_keeps_rejected", step):
                    self.kept[item.request.request_id] = (item.start + len(tokens), drafts[len(tokens) - 1])
        for planted in bug_classes.PLANTED_CLASSES:  # the classes that carry their own code (one module each)
            if planted.after_verify is not None and self._asked(planted.name):
                emitted = planted.after_verify(items, logits, emitted, self.faults, step)
        return emitted

    def _accept_one_more(self, items, logits: torch.Tensor, emitted: list[list[int]], step: int) -> list[list[int]]:
        out = list(emitted)
        for r, (item, first) in enumerate(zip(items, _first_rows(items), strict=True)):
            drafts, a = item.request.draft_tokens[: _width(item) - 1], len(emitted[r]) - 1
            if item.is_context or a >= len(drafts) or not self.faults.due("accept_off_by_one", step):
                continue
            req = item.request
            row = first + a + 1  # the target's distribution after the wrongly accepted draft
            after = verify(
                logits[row : row + 1], [], req.sampling, req.seed, len(req.output_token_ids) + a + 1, req.stream
            )
            out[r] = drafts[: a + 1] + after
        return out


def _emit_rejected_draft(items, emitted: list[list[int]], faults: FaultInjector, step: int) -> list[list[int]]:
    """The first request whose first draft was rejected gets that draft token instead of the target's (same count
    of tokens, so the KV bookkeeping still holds)."""
    for r, item in enumerate(items):
        drafts = item.request.draft_tokens
        if item.is_context or not drafts or len(emitted[r]) != 1 or emitted[r][0] == drafts[0]:
            continue
        if faults.due("emit_rejected_draft", step):
            emitted = [list(e) for e in emitted]
            emitted[r] = [drafts[0]]
        break
    return emitted


def _on_rejection_path(item) -> bool:
    """A request verified by rejection sampling with at least one draft."""
    req = item.request
    return not item.is_context and _width(item) > 1 and req.stream is not None and not req.sampling.greedy


def _width(item) -> int:
    """Rows of logits a scheduled request verifies: 1 for a context request, 1 + its drafts for a generation."""
    return 1 if item.is_context else item.num_new_tokens


def _first_rows(items) -> list[int]:
    rows, row = [], 0
    for item in items:
        rows.append(row)
        row += _width(item)
    return rows
