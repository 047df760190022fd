"""Fault points: `--inject POINT[:ARG][@STEP][xCOUNT]`, parsed and scheduled here, each firing recorded as a
`fault_injected` event. A leaf: it names the points and counts their firings, and knows nothing of the engine.

Environmental faults raise where the engine calls `FaultInjector.check`, and the engine must survive them:
  warmup_oom            an out-of-memory error in the max-shape general warmup
  prepare_for_spec_dec  right after the spec-dec worker saved attention metadata
  draft_step[:K]        before draft step K (0 = the pass over all positions; any step when K is omitted)
  target_forward        half-way through the target model's layers
  restore               just before the worker restores the saved metadata

Behaviour faults are planted code bugs (declared in `bug_classes`; the `planted` package builds each into the engine
once, at build): they raise nothing and change results. A code bug is in every engine a run builds (the spec-dec
engine, its twin, a separate baseline, an audit engine), so they stay in every configuration of the run
(`behaviour_faults`).

STEP is the engine step (counted from 0 over the engine's life; warmup steps count too); omitted: the first time the
point is reached; `@random`: a step drawn from [0, 16) by a generator seeded with the engine seed, so a run is
reproducible. COUNT is how many times it fires, at that step and the following ones: default 1, except for the
recurring behaviour faults (a code bug is always there), which fire every time their path is reached.
Examples: warmup_oom, draft_step:1@3, target_forward@5x2, restore@random, accept_off_by_one, spec_alters_target@4x1.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import UserError
from . import bug_classes
from .events import EventLog

ENVIRONMENT_POINTS = ("warmup_oom", "prepare_for_spec_dec", "draft_step", "target_forward", "restore")
# The planted bug classes, each declared once (`bug_classes`): the rejection sampler's (each the RejectionRule field
# it sets), and those that fire every time their path is reached (a code bug is always there).
REJECTION_POINTS = bug_classes.names("rejection_sampler")
RECURRING_POINTS = bug_classes.names(recurring=True)
BEHAVIOUR_POINTS = bug_classes.names()  # change results instead of raising
FAULT_POINTS = ENVIRONMENT_POINTS + BEHAVIOUR_POINTS
# Reached only under spec-dec. Behaviour points are all spec-dec paths, but a plain engine may carry them (a planted
# bug is in the whole build); only the environmental ones are refused outright without --spec (the engine config).
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
                import torch  # late: parsing and validating faults (the config) needs no torch

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
