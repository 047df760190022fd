"""The sides of a run: the engine under test ("run"), its non-speculative baseline ("baseline") and the lossless
gate's noise-floor control ("control": the plain side again at another batch shape). A backend builds an engine for
a side (`backends`); the run pipeline (`run`) decides which sides a run needs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from ...workers.config import EngineConfig
from ...workers.interface import EngineIdentity
from ..lossless.control import control_identity
from ..run_identity import baseline_config

ROLES = ("run", "baseline", "control")


@dataclass(frozen=True)
class Side:
    role: str  # one of ROLES
    shape: Mapping[str, int] | None = None  # the control's: {"max_batch_size": 1} or {"concurrency": 1}

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"unknown side {self.role!r} (known: {', '.join(ROLES)})")
        if (self.role == "control") != (self.shape is not None):
            raise ValueError("a control side, and only a control side, has a shape")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (a torchrun job's payload)."""
        return {"role": self.role, "shape": dict(self.shape) if self.shape is not None else None}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Side:
        return cls(d["role"], d.get("shape"))

    def describe(self) -> str:
        """In words, for progress lines: "the noise-floor control (the plain side at max batch size 1)"."""
        if self.role != "control":
            return "the run" if self.role == "run" else "the non-speculative baseline"
        where = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in (self.shape or {}).items())
        return f"the noise-floor control (the plain side at {where})"


RUN = Side("run")
BASELINE = Side("baseline")


def control_side(shape: Mapping[str, int]) -> Side:
    return Side("control", dict(shape))


def side_config(config: EngineConfig, side: Side) -> EngineConfig:
    """Our engine's configuration for a side: as given, its baseline (no draft; environmental faults dropped), or the
    baseline at the control's batch size."""
    if side.role == "run":
        return config
    plain = baseline_config(config)
    return plain if side.role == "baseline" else replace(plain, max_batch_size=int(side.shape["max_batch_size"]))


def side_identity(identity: EngineIdentity, side: Side) -> EngineIdentity:
    """The identity a side's run is recorded under, given its engine's: a control's is marked with its shape."""
    return control_identity(identity, dict(side.shape)) if side.role == "control" else identity
