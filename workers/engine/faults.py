"""Fault injection: `--inject POINT[:ARG][@STEP][xCOUNT]`, each firing recorded as a `fault_injected` event.

Environmental faults (an error is raised where the engine calls `FaultInjector.check`; the engine must survive it):
  warmup_oom            an out-of-memory error in the max-shape general warmup
  prepare_for_spec_dec  right after the spec-dec worker saved attention metadata
  draft_step[:K]        before draft step K (0 = the pass over all positions; any step when K is omitted)
  target_forward        half-way through the target model's layers
  restore               just before the worker restores the saved metadata

Behaviour faults: planted code bugs of the classes that reach users of spec-dec engines. Each raises nothing and
changes results; each is a named hook on its own code path (`PlantedBugs` below, the spec worker, the model's
capture), fires only when asked and only on that path, and is recorded as a `fault_injected` event (once per
engine step it fired in). A code bug is in every engine a run builds (the spec-dec engine, its paired twin, a
separate baseline, an audit engine), so these stay in every configuration of the run (`behaviour_faults`).
  emit_rejected_draft   verification emits a rejected first draft in place of the target's token (once, or xCOUNT)
  draft_kv_into_target  the draft layer writes (and reads) its KV in the target's last KV layer instead of its own
                        (vLLM PR #25406's class). The prompt's KV blocks are shared with the paired twin, which
                        then carries the same corruption: only a baseline with no spec worker sees it.
  spec_alters_target    while a spec worker is attached, the hidden-state capture rounds the target's residual
                        stream in place to FP8's precision (e4m3: 3 stored mantissa bits, the draft's feature
                        format; the range is kept) at every captured layer, for every request of the batch, twins
                        included
  rewind_keeps_rejected the KV of a rejected draft is kept as committed: at the position where the target's own
                        token replaced a rejected draft, the cache holds the draft's KV, not the token's
  accept_off_by_one     one draft more is accepted than verified: the first rejected draft is emitted as accepted,
                        followed by the target's token after it (KV and counters stay consistent with the lie)
  sample_key_shift      at temperature > 0 the spec path samples output position p with position p+1's key
                        (sampling is keyed by (seed, output position), workers/engine/sampling.py); greedy is unaffected
  verify_width_numerics a request's logits depend on how many tokens it verifies: a small deterministic
                        perturbation (5 % of the logits' spread) of every request verifying more than 1 token
                        (1 + K rows), enough to flip a close greedy choice now and then in float32
  rewind_leaks_blocks   a rewind that gives back the KV blocks holding only rejected drafts drops them from the
                        request's block table without returning them to the pool: outputs stay right, the pool
                        shrinks until it runs dry (caught at drain: the `kv_block_leak` event)
  aux_layers_off_by_one the draft's auxiliary features are read one layer late: the output of each capture layer
                        instead of its input (the "hidden_states[i] is the input of layer i" convention broken, an
                        off-by-one between engines' and trainers' layer ids). The target computes exactly what it
                        did, so every output stays the same; the drafter reads features it was not trained on and
                        accepts less (on the embedded default about 5 % lower AL: a quiet regression only
                        acceptance sees, which the paired A/B catches and the single-run gate at 10 documents does
                        not)

The sampled classes: bugs of the rejection sampler (`--spec-sampling rejection`, workers/spec/rejection.py), each
a field of its `RejectionRule`, firing on a request verifying drafts at temperature > 0 (and only where its bug can
change anything); invisible to any greedy check, caught by the sampled lossless gate (evals/lossless/sampled.py):
  rejection_greedy        verification silently takes the greedy branch at temperature > 0 (SGLang on ROCm / NPU)
  residual_keeps_draft    after a rejection the token is drawn from p itself, the rejected draft left in the residual
  accept_unit_temperature the accept test reads the target's probabilities at temperature 1 while the plain sampler
                          uses T (vLLM V0, issue #9834); fires only at temperature != 1
  spec_filter_order       the spec path takes the nucleus of the whole distribution, then the top k; the plain sampler
                          the nucleus of the top k (SGLang PR #36173); fires only with both top-k and top-p set
  accept_neighbour_row    the accept test of draft i reads row i + 1's probability of it
  restart_stream          the request's random stream restarts from its seed at every verification step (a
                          generator re-created per step): each step reads the same numbers, so every draw is
                          distributed right alone while a request's accept decisions become fixed thresholds;
                          across requests the draws look uniform, within one they are not independent
The seed's own bug (metadata saved for the draft never restored after a tolerated warmup OOM) is not a fault point:
it is `--spec-guard none` with `--inject warmup_oom` (see workers/spec/base.py and `selftest --mutants`).

STEP is the engine step (counted from 0 over the engine's life; warmup steps count too); omitted: the first
time the point is reached; `@random`: a step drawn from [0, 16) by a generator seeded with the engine seed, so
a run is reproducible. COUNT is how many times it fires, at that step and the following ones: default 1, except
for the recurring behaviour faults (a code bug is always there), which fire every time their path is reached.
Examples: warmup_oom, draft_step:1@3, target_forward@5x2, restore@random, accept_off_by_one, spec_alters_target@4x1.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from ...errors import UserError
from ..events import EventLog
from ..spec.rejection import RejectionRule

ENVIRONMENT_POINTS = ("warmup_oom", "prepare_for_spec_dec", "draft_step", "target_forward", "restore")
# The planted bugs of the rejection sampler (the sampled classes): each the RejectionRule field it sets.
REJECTION_POINTS = (
    "rejection_greedy",
    "residual_keeps_draft",
    "accept_unit_temperature",
    "spec_filter_order",
    "accept_neighbour_row",
    "restart_stream",
)
RECURRING_POINTS = (
    "draft_kv_into_target",
    "spec_alters_target",
    "rewind_keeps_rejected",
    "accept_off_by_one",
    "sample_key_shift",
    "verify_width_numerics",
    "rewind_leaks_blocks",
    "aux_layers_off_by_one",
    *REJECTION_POINTS,
)
BEHAVIOUR_POINTS = ("emit_rejected_draft", *RECURRING_POINTS)  # change results instead of raising
FAULT_POINTS = ENVIRONMENT_POINTS + BEHAVIOUR_POINTS
# Reached only under spec-dec. Behaviour points are all spec-dec paths, but a plain engine may carry them (a planted
# bug is in the whole build); only the environmental ones are refused outright without --spec (workers/config.py).
SPEC_POINTS = ("prepare_for_spec_dec", "draft_step", "restore", *BEHAVIOUR_POINTS)
_SYNTAX = re.compile(r"^(?P<point>[a-z_]+)(?::(?P<arg>\d+))?(?:@(?P<step>\d+|random))?(?:x(?P<count>\d+))?$")


class InjectedFault(RuntimeError):
    """A fault that `--inject` asked for (not a bug)."""


@dataclass(frozen=True)
class FaultSpec:
    point: str
    arg: int | None = None
    step: int | None = None
    count: int | None = 1  # None: every time the point is reached (recurring behaviour faults)
    text: str = ""

    @classmethod
    def parse(cls, text: str, seed: int = 0) -> FaultSpec:
        m = _SYNTAX.match(text.strip())
        if not m or m["point"] not in FAULT_POINTS:
            raise UserError(
                f"cannot read --inject {text!r}: expected POINT[:K][@STEP|@random][xCOUNT] with POINT one of "
                f"{', '.join(FAULT_POINTS)}"
            )
        if m["arg"] is not None and m["point"] != "draft_step":
            raise UserError(f"--inject {text!r}: only draft_step takes :K")
        step = (
            None
            if m["step"] is None
            else (random.Random(seed).randrange(16) if m["step"] == "random" else int(m["step"]))
        )
        count = int(m["count"]) if m["count"] is not None else (None if m["point"] in RECURRING_POINTS else 1)
        if count is not None and count < 1:
            raise UserError(f"--inject {text!r}: count must be at least 1")
        arg = None if m["arg"] is None else int(m["arg"])
        return cls(m["point"], arg, step, count, text.strip())

    @property
    def is_behaviour(self) -> bool:
        return self.point in BEHAVIOUR_POINTS


def behaviour_faults(texts: Sequence[str]) -> tuple[str, ...]:
    """The --inject specs that are planted code bugs (behaviour faults), in order: every engine a run builds carries
    them, each firing only on its own code path; the others are environmental (they act on one engine)."""
    return tuple(t for t in texts if FaultSpec.parse(t).is_behaviour)


class FaultInjector:
    def __init__(self, specs: list[FaultSpec], events: EventLog) -> None:
        self.specs = specs
        self.events = events
        self.remaining = [s.count for s in specs]
        self._recorded_step = [-1] * len(specs)  # the last engine step a firing of each spec was recorded in

    @classmethod
    def from_strings(cls, texts: tuple[str, ...], events: EventLog, seed: int = 0) -> FaultInjector:
        return cls([FaultSpec.parse(t, seed) for t in texts], events)

    def wants(self, point: str) -> bool:
        return any(s.point == point for s in self.specs)

    def check(self, point: str, step: int, arg: int | None = None) -> None:
        """Raise here if a fault is due at this point and step."""
        if self.due(point, step, arg):
            if point == "warmup_oom":
                raise torch.OutOfMemoryError(f"injected out-of-memory ({point})")
            raise InjectedFault(f"injected fault at {point}{'' if arg is None else f':{arg}'} step {step}")

    def due(self, point: str, step: int, arg: int | None = None) -> bool:
        """Whether a fault fires here now (counted, and recorded as a `fault_injected` event the first time it fires
        in an engine step)."""
        for i, spec in enumerate(self.specs):
            if spec.point != point or self.remaining[i] == 0:
                continue
            if spec.arg is not None and spec.arg != arg:
                continue
            if spec.step is not None and step < spec.step:
                continue
            if self.remaining[i] is not None:
                self.remaining[i] -= 1
            if self._recorded_step[i] != step:
                self._recorded_step[i] = step
                self.events.emit("fault_injected", point=point, step=step, arg=arg, spec=spec.text)
            return True
        return False


# --- the behaviour faults' hooks in the engine step ----------------------------------------------------------------


class PlantedBugs:
    """The hook points of the behaviour faults in the engine step (workers/engine/executor.py calls each by name). Each
    returns what it was given unless its fault was asked for, is due, and its code path is taken. The spec worker's
    own (draft_kv_into_target) is `Eagle3OneModelWorker.draft_kv_index`."""

    def __init__(self, faults: FaultInjector | None, spec_attached: bool) -> None:
        self.faults = faults
        self.spec_attached = spec_attached
        self._kept: dict[int, tuple[int, int]] = {}  # rewind_keeps_rejected: request id -> (KV position, draft)

    def _asked(self, point: str) -> bool:
        return self.faults is not None and self.faults.wants(point)

    def step_inputs(self, items, input_ids: torch.Tensor, step: int) -> torch.Tensor:
        """rewind_keeps_rejected, second half: a request whose rejected draft's KV was kept feeds that draft again at
        its position, so the KV written there is the draft's (exactly the KV kept from the last step)."""
        if not self._kept:
            return input_ids
        kept_by_request, self._kept = self._kept, {}  # a request not in this step is recomputed, or finished
        row, changed = 0, None
        for item in items:
            kept = kept_by_request.get(item.request.request_id)
            if kept is not None and not item.is_context and kept[0] == item.start:
                changed = input_ids.clone() if changed is None else changed
                changed[row] = kept[1]
            row += item.num_new_tokens
        return input_ids if changed is None else changed

    def capture_hook(self, step: int) -> Callable[[torch.Tensor], None] | None:
        """spec_alters_target: what the model calls on each captured layer's input (None: nothing)."""
        if not (self.spec_attached and self._asked("spec_alters_target")):
            return None

        def round_in_place(h: torch.Tensor) -> None:
            if self.faults.due("spec_alters_target", step):
                mantissa, exponent = torch.frexp(h.float())  # mantissa in [0.5, 1): keep 4 significant bits
                h.copy_(torch.ldexp(torch.round(mantissa * 16) / 16, exponent))

        return round_in_place

    def capture_layers(self, layers: tuple[int, ...], num_layers: int, step: int) -> tuple[int, ...]:
        """aux_layers_off_by_one: the layers whose input the spec worker's features are read from, one later each
        (the output of the layer it asked for; the last layer stays the last)."""
        if not (self.spec_attached and layers and self._asked("aux_layers_off_by_one")):
            return layers
        if not self.faults.due("aux_layers_off_by_one", step):
            return layers
        return tuple(min(i + 1, num_layers - 1) for i in layers)

    def verify_logits(self, items, logits: torch.Tensor, step: int) -> torch.Tensor:
        """verify_width_numerics: the logits of requests verifying more than one token are perturbed."""
        if not self._asked("verify_width_numerics"):
            return logits
        wide: list[tuple[int, int]] = []  # (logits row, KV position) of every row of a request verifying > 1
        for item, first in zip(items, _first_rows(items), strict=True):
            if _width(item) > 1:
                wide.extend((first + j, item.start + j) for j in range(_width(item)))
        if not wide or not self.faults.due("verify_width_numerics", step):
            return logits
        logits = logits.clone()
        rows = [r for r, _ in wide]
        noise = torch.stack([_width_noise(logits.shape[-1], position) for _, position in wide]).to(logits.device)
        logits[rows] += WIDTH_NOISE * logits[rows].std(dim=-1, keepdim=True) * noise
        return logits

    def sample_key_shift(self, items, step: int) -> list[int] | None:
        """sample_key_shift: the key offset of each request's sampled verification (None: no shift anywhere)."""
        if not self._asked("sample_key_shift"):
            return None
        shift = [int(not it.is_context and _width(it) > 1 and not it.request.sampling.greedy) for it in items]
        return shift if any(shift) and self.faults.due("sample_key_shift", step) else None

    def rejection_rules(self, items, step: int) -> list[RejectionRule] | None:
        """The sampled classes: per request, the rejection rule with the asked bugs set where their path is taken (a
        request verifying drafts with its own random stream at temperature > 0, and the bug's condition); None when
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

    def after_verify(self, items, logits: torch.Tensor, emitted: list[list[int]], step: int) -> list[list[int]]:
        """emit_rejected_draft, accept_off_by_one, and the first half of rewind_keeps_rejected (which draft's KV is
        kept where), on the verified tokens of the step."""
        if self._asked("emit_rejected_draft"):
            emitted = emit_rejected_draft(items, emitted, self.faults, step)
        if self._asked("accept_off_by_one"):
            emitted = self._accept_one_more(items, logits, emitted, step)
        if self._asked("rewind_keeps_rejected"):
            for item, tokens in zip(items, emitted, strict=True):
                drafts = item.request.draft_tokens[: _width(item) - 1]
                rejected = not item.is_context and len(tokens) <= len(drafts)  # the target replaced a draft
                if rejected and self.faults.due("rewind_keeps_rejected", step):
                    self._kept[item.request.request_id] = (item.start + len(tokens), drafts[len(tokens) - 1])
        return emitted

    def _accept_one_more(self, items, logits: torch.Tensor, emitted: list[list[int]], step: int) -> list[list[int]]:
        from ..spec.verify import verify  # late: spec/ imports this module

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


def rewind_leak_hook(faults: FaultInjector | None, step: Callable[[], int]) -> Callable[[], bool] | None:
    """rewind_leaks_blocks: what the KV-cache manager asks on a rewind that would give blocks back (the manager's
    `leaks_on_rewind`); None when the fault was not asked for. `step`: the engine step now."""
    if faults is None or not faults.wants("rewind_leaks_blocks"):
        return None
    return lambda: faults.due("rewind_leaks_blocks", step())


def _on_rejection_path(item) -> bool:
    """A request verified by rejection sampling with at least one draft."""
    req = item.request
    return not item.is_context and _width(item) > 1 and req.stream is not None and not req.sampling.greedy


def can_change(point: str, params) -> bool:
    """Whether a sampled class can change anything for a request sampled with `params` (a bug that cannot is not
    said to fire: accept_unit_temperature at temperature 1, spec_filter_order without both filters)."""
    if point == "accept_unit_temperature":
        return params.temperature != 1.0
    if point == "spec_filter_order":
        return params.top_k > 0 and params.top_p < 1.0
    return True


def planted_rule(points: Sequence[str]) -> RejectionRule:
    """The rejection rule with these sampled classes planted."""
    return RejectionRule(
        greedy="rejection_greedy" in points,
        residual_keeps_draft="residual_keeps_draft" in points,
        accept_unit_temperature="accept_unit_temperature" in points,
        swapped_filter_order="spec_filter_order" in points,
        accept_row_offset=int("accept_neighbour_row" in points),
        restart_stream="restart_stream" in points,
    )


# In units of each row's logit spread (standard deviation): flips the greedy token where the top two are closer than
# about this fraction of the spread (measured: a few tokens in a hundred on SmolLM2, one in five on `tiny`).
WIDTH_NOISE = 0.05


def _width_noise(vocab: int, position: int) -> torch.Tensor:
    """Deterministic, and different at every position (a fixed bias per token would never flip a repeated choice)."""
    return torch.randn(vocab, generator=torch.Generator().manual_seed(position))


def _width(item) -> int:
    """Rows of logits a scheduled request verifies: 1 for a context request, 1 + its drafts for a generation."""
    return 1 if item.is_context else item.num_new_tokens


def _first_rows(items) -> list[int]:
    rows, row = [], 0
    for item in items:
        rows.append(row)
        row += _width(item)
    return rows


def emit_rejected_draft(items, emitted: list[list[int]], faults: FaultInjector, step: int) -> list[list[int]]:
    """The deliberate bug of the `emit_rejected_draft` fault: the first request whose first draft was rejected
    gets that draft token instead of the target's (same count of tokens, so the KV bookkeeping still holds)."""
    for r, item in enumerate(items):
        drafts = item.request.draft_tokens
        if item.is_context or not drafts or len(emitted[r]) != 1 or emitted[r][0] == drafts[0]:
            continue
        if faults.due("emit_rejected_draft", step):
            emitted = [list(e) for e in emitted]
            emitted[r] = [drafts[0]]
        break
    return emitted
