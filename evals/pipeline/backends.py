"""Where a run's engine runs: the backends of `pipeline.run(plan, backend)` (orchestration.py), and their registry.

A backend turns a RunPlan into a recorded, gated run on one kind of engine, and returns its summary:

| name | engine | module |
|---|---|---|
| local | our engine in this process, its lossless baseline paired or separate | backends.py |
| torchrun | our engine sharded over a torchrun job's ranks (TP x DP), rank 0 driving | backend_torchrun.py |
| endpoint | any OpenAI-compatible server (workers/remote/), its baseline another server | backends.py |

Commands pick one by name (`make_backend`), as the spec workers and KV managers are picked; a new backend is one
entry here. Each is a small frozen value: building one starts nothing, `run` does the work."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol

from ...errors import UserError
from ...results.run_summary import RunSummary
from ...workers.config import EngineConfig

if TYPE_CHECKING:
    from ...workers.remote.endpoint_config import EndpointConfig
    from ..run_types import RunPlan

# progress_for(): a context manager giving a progress callback (done, total, stats), one per evaluation
ProgressFor = Callable[[], AbstractContextManager[Callable | None]]


class Backend(Protocol):
    def run(self, plan: RunPlan, progress_for: ProgressFor | None = None) -> RunSummary | None:
        """Evaluate, record and gate the run; returns its summary (None: nothing ran, e.g. a torchrun dry run)."""
        ...


@dataclass(frozen=True)
class LocalBackend:
    """Our engine in this process. A spec-dec run whose baseline is not recorded gets it paired (one prefill per
    prompt) or, with baseline="separate", as a run of its own first."""

    config: EngineConfig
    baseline: str = "paired"

    def run(self, plan: RunPlan, progress_for: ProgressFor | None = None) -> RunSummary:
        from .orchestration import run_with_baseline

        return run_with_baseline(self.config, plan, progress_for, self.baseline)


@dataclass(frozen=True)
class EndpointBackend:
    """An OpenAI-compatible server; `baseline`, when given, is the same engine without speculation, evaluated first
    as the lossless gate's baseline."""

    target: EndpointConfig
    baseline: EndpointConfig | None = None

    @classmethod
    def from_flags(cls, url: str, baseline_url: str | None, declared: dict[str, Any], config: EngineConfig
                   ) -> EndpointBackend:  # fmt: skip
        """The engine flags declare what serves `url` (--spec eagle3 --draft-len K: it speculates); `declared`
        holds the endpoint's own settings (tokenizer, key, concurrency, ...)."""
        from ...workers.remote.endpoint_config import EndpointConfig

        spec = config.spec
        target = EndpointConfig(url=url, spec=spec.algorithm if spec else None,
                                max_draft_len=spec.max_draft_len if spec else 0, **declared)  # fmt: skip
        return cls(target, EndpointConfig(url=baseline_url, **declared) if baseline_url else None)

    def run(self, plan: RunPlan, progress_for: ProgressFor | None = None) -> RunSummary:
        from .orchestration import run_endpoint

        return run_endpoint(self.target, plan, self.baseline, progress_for)


# name -> "module:class", imported when picked (the torchrun backend brings launch/ and its job plumbing)
_BACKENDS = MappingProxyType(
    {
        "local": "specdec_eval.evals.pipeline.backends:LocalBackend",
        "torchrun": "specdec_eval.evals.pipeline.backend_torchrun:TorchrunBackend",
        "endpoint": "specdec_eval.evals.pipeline.backends:EndpointBackend",
    }
)
BACKENDS: tuple[str, ...] = tuple(_BACKENDS)


def backend_class(name: str) -> type:
    try:
        module, cls = _BACKENDS[name].split(":")
    except KeyError:
        raise UserError(f"unknown run backend {name!r} (known: {', '.join(BACKENDS)})") from None
    return getattr(importlib.import_module(module), cls)


def make_backend(name: str, *args: Any, **kwargs: Any) -> Backend:
    """The backend `name`, built from its own settings (see each class)."""
    return backend_class(name)(*args, **kwargs)
