"""Fault injection: `--inject POINT[:ARG][@STEP][xCOUNT]`, each firing recorded as a `fault_injected` event.

Points (where the engine calls `FaultInjector.check`):
  warmup_oom            an out-of-memory error in the max-shape general warmup
  prepare_for_spec_dec  right after the spec-dec worker saved attention metadata
  draft_step[:K]        before draft step K (0 = the pass over all positions; any step when K is omitted)
  target_forward        half-way through the target model's layers
  restore               just before the worker restores the saved metadata
  emit_rejected_draft   a deliberate spec-dec bug, not an error: a rejected first draft token is emitted in
                        place of the target's token (what a broken verify would do). It raises nothing; it exists
                        to prove that the lossless gate catches output changes that accuracy does not.

STEP is the engine step (counted from 0 over the engine's life; warmup steps count too); omitted: the first
time the point is reached; `@random`: a step drawn from [0, 16) by a generator seeded with the engine seed, so
a run is reproducible. COUNT (default 1) is how many times it fires, at that step and the following ones.
Examples: warmup_oom, draft_step:1@3, target_forward@5x2, restore@random.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

import torch

from .errors import UserError
from .events import EventLog

FAULT_POINTS = ("warmup_oom", "prepare_for_spec_dec", "draft_step", "target_forward", "restore", "emit_rejected_draft")
BEHAVIOUR_POINTS = ("emit_rejected_draft",)  # change results instead of raising
SPEC_POINTS = ("prepare_for_spec_dec", "draft_step", "restore", "emit_rejected_draft")  # reached only under spec-dec
_SYNTAX = re.compile(r"^(?P<point>[a-z_]+)(?::(?P<arg>\d+))?(?:@(?P<step>\d+|random))?(?:x(?P<count>\d+))?$")


class InjectedFault(RuntimeError):
    """A fault that `--inject` asked for (not a bug)."""


@dataclass(frozen=True)
class FaultSpec:
    point: str
    arg: int | None = None
    step: int | None = None
    count: int = 1
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
        count = int(m["count"] or 1)
        if count < 1:
            raise UserError(f"--inject {text!r}: count must be at least 1")
        arg = None if m["arg"] is None else int(m["arg"])
        return cls(m["point"], arg, step, count, text.strip())


class FaultInjector:
    def __init__(self, specs: list[FaultSpec], events: EventLog) -> None:
        self.specs = specs
        self.events = events
        self.remaining = [s.count for s in specs]

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
        """Whether a fault fires here now (counted and recorded as a `fault_injected` event)."""
        for i, spec in enumerate(self.specs):
            if spec.point != point or self.remaining[i] == 0:
                continue
            if spec.arg is not None and spec.arg != arg:
                continue
            if spec.step is not None and step < spec.step:
                continue
            self.remaining[i] -= 1
            self.events.emit("fault_injected", point=point, step=step, arg=arg, spec=spec.text)
            return True
        return False


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
