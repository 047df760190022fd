"""The lossless gate's noise-floor control: the non-speculative side decoded a second time at another batch shape.

Outside float32 two plain runs differ where the batch shape changes the reduction order; their divergences are
numerics by construction, and the margins they leave are the noise floor a spec-dec run's
divergences are judged against. The control is a run of its own, recorded under the baseline's key plus a
`noise_control` marker naming the shape (so it is never taken for a baseline, and is reused by every later spec-dec
run of the same configuration):

- our engine: the baseline at max batch size 1 (2 when the run itself uses 1). Measured on this project's CPU
  (bf16, tiny and SmolLM2-135M): batch sizes 64 and 16 decode bit-identically (each row's reduction is the same
  whatever the batch), while a batch of one takes other kernels: 2 of 32 (tiny) and 2 of 8 (SmolLM2) outputs
  diverge, gap moves up to 0.03 and 0.6 nats. So only 1 against more-than-1 moves the numerics here.
- an endpoint: the baseline server at concurrency 1 (2 when the run itself uses 1): the server then batches other
  requests together. Reused only for a server the run started itself (keyed by its command); a server known only
  by its URL is measured again each run.

What the control is and how it is found lives here; when it is decoded (before the baseline and the run, once per
configuration) is the run pipeline's one policy, for every backend.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ...results import store
from ...workers.interface import EngineIdentity
from ..run_identity import baseline_identity, find_baseline
from ..run_types import EvalOptions
from .check import EXACT_DTYPES

MARKER = "noise_control"


def other_shape(size: int) -> int:
    """The control's batch size (or concurrency) for a run that uses `size`: 1, or 2 when that is 1 already."""
    return 1 if size > 1 else 2


def control_identity(identity: EngineIdentity, shape: dict[str, int]) -> EngineIdentity:
    """The control of a run of `identity` (spec-dec or plain): the plain configuration, marked with its shape."""
    base = baseline_identity(identity) if identity.spec else identity
    config = {**base.config, MARKER: dict(shape)}
    if "max_batch_size" in shape:
        config["max_batch_size"] = shape["max_batch_size"]
    return replace(base, config=config)


def candidate_shapes(identity: EngineIdentity) -> list[dict[str, int]]:
    """Shapes a recorded control of this configuration may have: ours is determined by the configuration; an
    endpoint's concurrency is not part of its identity, so either of the two a control can use."""
    if identity.kind == "endpoint":
        return [{"concurrency": 1}, {"concurrency": 2}]
    return [{"max_batch_size": other_shape(int(identity.config.get("max_batch_size") or 1))}]


def not_reusable(identity: EngineIdentity) -> str | None:
    """Why no recorded control may stand for this configuration's noise (None: one may). A control is keyed by what
    determines the noise: our engine's configuration, or the command that started a server. A server this run did
    not start is known only by its URL, model id, owner and version, which another server behind the same port
    shares: its noise is measured again."""
    if identity.kind == "endpoint" and not identity.config.get("server_command"):
        return (
            "the baseline server was not started by this run (--baseline-serve-cmd), so what serves its URL may "
            "have changed since a control was recorded"
        )
    return None


def find_control(out: str, identity: EngineIdentity, options: EvalOptions) -> store.Run | None:
    """The newest finished control recorded for a run of this configuration, if any may stand for it."""
    if not_reusable(identity) is not None:
        return None
    for shape in candidate_shapes(identity):
        run = find_baseline(out, control_identity(identity, shape), options)
        if run is not None:
            return run
    return None


def wants_control(asked: bool | None, spec: bool, dtype: str) -> bool:
    """--control / --no-control, else automatically for a spec-dec run in a dtype that is not exact."""
    if asked is not None:
        return asked
    return spec and dtype not in EXACT_DTYPES


class ControlEngine:
    """An engine whose runs are recorded as a control: the same engine, its identity marked with the shape."""

    def __init__(self, engine: Any, shape: dict[str, int]) -> None:
        self._engine = engine
        self._identity = control_identity(engine.identity, shape)

    @property
    def identity(self) -> EngineIdentity:
        return self._identity

    def __getattr__(self, name: str) -> Any:  # everything else is the wrapped engine's
        return getattr(self._engine, name)
