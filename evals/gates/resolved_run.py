"""A run resolved once, at recording: who ran it (engine identity, test id), what it was asked (its plan, the opt-in
gates), how each task was decoded (`DecodingKind`) and what its lossless gate compares with (the baseline and its
control, found and loaded once). A frozen value every gate reads; none of them derives these again."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from ...workers.interface import EngineIdentity
from ..lossless.baseline import ResolvedBaseline
from ..lossless.scoring import spec_sampling as spec_sampling_of
from ..run_types import RunPlan, TaskResult
from .acceptance import acceptance_path


class DecodingKind(Enum):
    """How one task's outputs were decoded, which decides how its losslessness can be judged."""

    GREEDY = "greedy"  # temperature 0: token for token
    PLAIN_SAMPLED = "plain sampled"  # temperature > 0 on a plain engine (a baseline, a twin, a control)
    COUPLED = "coupled"  # our coupled sampler: it reproduces the plain run's tokens
    REJECTION_SAMPLED = "rejection sampled"  # our --spec-sampling rejection: judged in distribution
    ENDPOINT_SAMPLED = "endpoint sampled"  # a server's own sampler: judged in distribution

    @property
    def in_distribution(self) -> bool:
        """Judged as draws from the plain engine's distribution, not token for token."""
        return self in (DecodingKind.REJECTION_SAMPLED, DecodingKind.ENDPOINT_SAMPLED)


SAMPLERS = {
    None: DecodingKind.PLAIN_SAMPLED,
    "coupled": DecodingKind.COUPLED,
    "rejection": DecodingKind.REJECTION_SAMPLED,
    "server": DecodingKind.ENDPOINT_SAMPLED,
}


@dataclass(frozen=True)
class ResolvedRun:
    """One run as the gates read it."""

    identity: EngineIdentity
    test_id: str
    plan: RunPlan
    baseline: ResolvedBaseline
    spec_sampling: str | None  # how drafts are verified at temperature > 0 (None: a plain engine)
    decoding: Mapping[str, DecodingKind] = field(default_factory=dict)  # by task
    opt_in: Mapping[str, str | None] = field(default_factory=dict)  # opt-in gate name -> its setting (--gate)

    @property
    def spec_dec(self) -> bool:
        return self.identity.spec is not None

    @property
    def acceptance_path(self) -> Path:
        """The acceptance-length references file of the run: --acceptance-refs, else the shipped one."""
        return acceptance_path(self.plan.options)


def decoding_kind(conditions: Mapping[str, Any] | None, spec_sampling: str | None) -> DecodingKind:
    """A task's decoding from its generation conditions and the engine's sampler."""
    temperature = float((conditions or {}).get("temperature") or 0.0)
    if temperature <= 0.0:
        return DecodingKind.GREEDY
    return SAMPLERS.get(spec_sampling, DecodingKind.COUPLED)


def resolve_run(
    identity: EngineIdentity,
    test_id: str,
    plan: RunPlan,
    baseline: ResolvedBaseline,
    results: list[TaskResult],
    opt_in: Mapping[str, str | None],
) -> ResolvedRun:
    """The run as its gates read it, resolved here once."""
    sampler = spec_sampling_of(identity)
    decoding = {r.task: decoding_kind(r.conditions, sampler) for r in results}
    return ResolvedRun(identity, test_id, plan, baseline, sampler, decoding, dict(opt_in))
