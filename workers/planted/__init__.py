"""Planted bugs (each class declared once, in `bug_classes`), built into an engine once, when it is built:
`--inject CLASS` swaps in a substitute verifier
(`verifier`, with the rejection sampler's bugs in `rejection`), a wrapper of the target model (`target`), a
subclass of the spec worker (`proposer`), or a KV-cache manager that leaks (`rewind_leak_hook`). The
clean engine step and the clean workers carry none of them, only the environmental fault points."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .. import bug_classes
from ..faults import FaultInjector
from ..model.causal_lm import CausalLM
from ..sampling.verify import Verifier
from ..spec.base import SpecWorkerBase
from .proposer import planted_worker_class
from .target import KeptDrafts, PlantedTarget
from .verifier import PlantedVerifier

TARGET_POINTS = bug_classes.names("target")  # built into a wrapper of the target model
VERIFIER_POINTS = bug_classes.names("verifier")  # built into a substitute verifier


@dataclass(frozen=True)
class StepParts:
    """What the engine step runs: the target it forwards, the verifier, the spec worker it drafts with."""

    target: Any  # the CausalLM, or a PlantedTarget around it
    verifier: Verifier
    proposer: Any  # the spec worker (or None)


def build_step_parts(
    model: CausalLM, spec_worker: SpecWorkerBase | None, faults: FaultInjector | None, clock: Callable[[], int]
) -> StepParts:
    """The clean parts, with each asked-for planted bug swapped in. `clock`: the engine step now."""
    if faults is None:
        return StepParts(model, Verifier(), spec_worker)
    kept: KeptDrafts = {}
    wants = lambda points: any(faults.wants(p) for p in points)  # noqa: E731
    spec_attached = spec_worker is not None
    target = PlantedTarget(model, faults, spec_attached, kept, clock) if wants(TARGET_POINTS) else model
    verifier = PlantedVerifier(faults, kept) if wants(VERIFIER_POINTS) else Verifier()
    return StepParts(target, verifier, spec_worker)


__all__ = ["StepParts", "build_step_parts", "planted_worker_class", "rewind_leak_hook"]


def rewind_leak_hook(faults: FaultInjector | None, step: Callable[[], int]) -> Callable[[], bool] | None:
    """rewind_leaks_blocks: what the KV-cache manager asks on a rewind that would give blocks back (the manager's
    `leaks_on_rewind`): a rewind that gives back the KV blocks holding only rejected drafts drops them from the
    request's block table without returning them to the pool; outputs stay right, the pool shrinks until it runs
    dry. None when the fault was not asked for. `step`: the engine step now."""
    if faults is None or not faults.wants("rewind_leaks_blocks"):
        return None
    return lambda: faults.due("rewind_leaks_blocks", step())
