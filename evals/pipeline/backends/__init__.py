"""Where a run's engines run: the backends of the run pipeline, their one constructor signature, and their
registry.

| name | engines | module |
|---|---|---|
| local | our engine in this process | local |
| torchrun | our engine sharded over a torchrun job's ranks (TP x DP), rank 0 driving | torchrun |
| endpoint | any OpenAI-compatible server; its plain side another server | endpoint |

A backend says what it can do (`Abilities`: can it pair, build a plain engine of the same configuration, decode a
control and at which shape, score) and how to build an engine for each side of a run; the policy of which sides a run
needs (its baseline, its control) is written once, in the pipeline's `run`. Each is built from a `RunTarget` (what the
command line says about the engine and where it runs), by name (`make_backend`), as the spec workers and KV managers
are picked; a new backend is one class and one entry here. Building one starts nothing."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol

from ....errors import UserError
from ....launch.job_options import JobOptions
from ....peers.client.options import EndpointOptions
from ....results.run_summary import RunSummary
from ....workers.config import EngineConfig
from ....workers.interface import EngineIdentity
from ...lossless.baseline import BaselineRef
from ...lossless.scoring import Scorer
from ...run_types import RunPlan
from ..one_run import ProgressFor
from ..run_sides import Side


@dataclass(frozen=True)
class RunTarget:
    """What runs a run: the engine the flags configure, and where (a torchrun job, a server, else this process)."""

    engine: EngineConfig
    job: JobOptions = field(default_factory=JobOptions)
    endpoint: EndpointOptions = field(default_factory=EndpointOptions)
    # flags given on the command line, where a backend must tell them from their defaults: engine flags (a server
    # declares only those) and --baseline (a server refuses `paired` when asked for, not when it is the default)
    declared: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Abilities:
    """What a backend runs and can do, for the run pipeline's policy (`run`)."""

    speculative: bool  # the engine under test speculates (so the run has a lossless gate)
    dtype: str  # what exactness of the lossless gate depends on (resolved where the backend knows it)
    plain_side: bool  # it can build the plain engine of the same configuration (a baseline, a control)
    pairs: bool  # it can decode a spec-dec run and its plain twins from one prefill, and audit the twins
    control_shape: Mapping[str, int] | None  # the noise-floor control's other batch shape; None: no control
    reuses_baseline: bool  # a plain run recorded earlier stands for its baseline (a server may have been redeployed)
    scores: bool  # it scores given continuations (teacher forcing: lm-eval's loglikelihood)
    why_not_paired: str | None = None  # said when paired decoding is asked and it cannot pair


class Backend(Protocol):
    target: RunTarget

    @property
    def abilities(self) -> Abilities: ...

    @property
    def dry_run(self) -> bool:
        """Whether the run only says what it would start (`show`)."""
        ...

    def check_target(self) -> None:
        """The command line's contradictions for this backend (UserError), before anything is read."""
        ...

    def preflight(self, plan: RunPlan) -> None:
        """What this backend's engines need, checked before any run folder is made (UserError)."""
        ...

    def identity(self, side: Side) -> EngineIdentity | None:
        """The identity a side's run is recorded under, known before anything starts (a recorded one is looked up
        by it); None where only a started engine knows it (a server's)."""
        ...

    def declared_identity(self) -> EngineIdentity:
        """What the engine under test is declared to be before it starts: enough to check a named baseline."""
        ...

    def evaluate(
        self, side: Side, plan: RunPlan, baseline: BaselineRef, progress_for: ProgressFor | None
    ) -> RunSummary:
        """Build the side's engine, run `plan` on it (evaluate, record, gate: `one_run`), release it."""
        ...

    def evaluate_paired(
        self, plan: RunPlan, control: str | None, progress_for: ProgressFor | None, score_sampled: bool = False
    ) -> RunSummary:
        """The run and its plain twins from one prefill, the twins audited; only where it pairs.
        score_sampled: the gate also scores the sampled outputs of our coupled sampler on a plain engine beside the
        run (the gate's "coupled" judge)."""
        ...

    def show(self, plan: RunPlan) -> None:
        """A dry run: print what would start."""
        ...

    def scorer(self) -> Scorer | None:
        """The plain engine that scores a sampled run's outputs by teacher forcing (the sampled lossless verdict's
        baseline), started only when the gate asks; None where there is none."""
        ...


def refuse_baseline_endpoint(target: RunTarget) -> None:
    """A backend of our own engine has no server under test to compare a baseline server with, nor a server to
    start or whose log to read."""
    if target.endpoint.baseline_endpoint is not None:
        raise UserError("--baseline-endpoint needs --endpoint (the server under test)")
    given = target.endpoint.server_flags_given
    if given:
        verb = "needs" if len(given) == 1 else "need"
        raise UserError(f"{' and '.join(given)} {verb} --endpoint (where the server answers)")


# name -> "module:class", imported when picked (the torchrun backend brings launch/ and its job plumbing)
_BACKENDS = MappingProxyType(
    {
        "local": "specdec_eval.evals.pipeline.backends.local:LocalBackend",
        "torchrun": "specdec_eval.evals.pipeline.backends.torchrun:TorchrunBackend",
        "endpoint": "specdec_eval.evals.pipeline.backends.endpoint:EndpointBackend",
    }
)
BACKENDS: tuple[str, ...] = tuple(_BACKENDS)


def backend_class(name: str) -> type:
    try:
        module, cls = _BACKENDS[name].split(":")
    except KeyError:
        raise UserError(f"unknown run backend {name!r} (known: {', '.join(BACKENDS)})") from None
    return getattr(importlib.import_module(module), cls)


def backend_name(target: RunTarget) -> str:
    """The backend a command line asks for: a server (--endpoint), a torchrun job (--gpus, --nnodes, --dry-run), or
    this process."""
    if target.endpoint.endpoint is not None:
        return "endpoint"
    return "torchrun" if target.job.is_job else "local"


def make_backend(name: str, target: RunTarget) -> Backend:
    """The backend `name` for this target; every backend is built the same way."""
    return backend_class(name)(target)
