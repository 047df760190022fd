"""The engine's registries, named lazily: each entry names its implementation as a "module:attribute" string that
is imported only when an engine is built (`resolve`). So the config validates a name without importing anything
above it, and this module imports nothing of the engine.

The KV-cache managers (`KV_CACHE_MANAGERS`, one per `--kv-cache` version) and the speculative-decoding methods (one
`SpecMethod` entry per `--spec` value): everything the rest of the project asks about a method comes from its
entry: which SpecConfig options it reads and how they are checked, how its draft model is built (or that it has
none), its worker class, the KV layers and look-ahead it adds to the pool, and its names in test ids and reference
files. A new method is one entry (`register`) plus its worker module."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from ..errors import UserError

if TYPE_CHECKING:
    from .config import SpecConfig

# Read-only: the CLI offers these names as choices, and nothing should add to them at run time.
KV_CACHE_MANAGERS: MappingProxyType[str, str] = MappingProxyType(
    {
        "v1": "specdec_eval.workers.kv_cache.v1:KVCacheManagerV1",
        "v2": "specdec_eval.workers.kv_cache.v2:KVCacheManagerV2",
    }
)


def resolve(target: str | Any) -> Any:
    """The object a "module:attribute" string names (anything else is returned as it is)."""
    if not isinstance(target, str):
        return target
    module, name = target.split(":")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class SpecMethod:
    name: str  # the --spec value, and SpecConfig.algorithm
    summary: str  # one line for --help and errors
    worker: str | type  # the SpecWorkerBase subclass, or "module:Class" imported when an engine is built
    # (DraftBuild) -> nn.Module: how its draft model is built; None: the method has no draft model
    draft_builder: str | Callable[..., Any] | None = None
    options: tuple[str, ...] = ()  # SpecConfig fields of its own; any other method-specific field must stay default
    check: Callable[[SpecConfig], None] | None = None  # validates those options (raises UserError)
    extra_kv_layers: int = 0  # KV layers it adds after the target's in the shared pool (Eagle3: its draft layer)
    draft_writes_kv_ahead: bool = False  # its K-1 later draft steps write KV past the verified tokens
    test_name: str = ""  # the test function in test ids; default test_<name>
    test_params: tuple[str, ...] = ()  # extra test-id parameters (Eagle3: "one_model", TensorRT-LLM's naming)
    reference_name: str = ""  # spec_dec_algo in the accuracy references (TensorRT-LLM's decoding type); default name

    @property
    def test_function(self) -> str:
        return self.test_name or f"test_{self.name}"

    @property
    def reference_algo(self) -> str:
        return self.reference_name or self.name

    def kv_lookahead(self, max_draft_len: int) -> int:
        """KV slots past the verified tokens the scheduler must ensure for one step."""
        return max(0, max_draft_len - 1) if self.draft_writes_kv_ahead else 0

    def worker_class(self) -> type:
        return resolve(self.worker)

    def build_draft(self, build: Any) -> Any:
        """The draft model for `build` (a DraftBuild), or None for a method without one."""
        return None if self.draft_builder is None else resolve(self.draft_builder)(build)


_METHODS: dict[str, SpecMethod] = {}


def register(method: SpecMethod) -> SpecMethod:
    """Add a method (or replace one of the same name: a test may register its own)."""
    _METHODS[method.name] = method
    return method


def unregister(name: str) -> None:
    _METHODS.pop(name, None)


def spec_methods() -> tuple[str, ...]:
    return tuple(_METHODS)


def spec_method(name: str) -> SpecMethod:
    try:
        return _METHODS[name]
    except KeyError:
        raise UserError(f"unknown spec-dec algorithm {name!r} (known: {', '.join(_METHODS)})") from None


def method_options() -> dict[str, list[str]]:
    """Method-specific SpecConfig field -> the methods that read it."""
    owners: dict[str, list[str]] = {}
    for m in _METHODS.values():
        for field in m.options:
            owners.setdefault(field, []).append(m.name)
    return owners


# --- the shipped methods ------------------------------------------------------------------------------------------


def _check_eagle3(spec: SpecConfig) -> None:
    if spec.capture_layers is not None and len(spec.capture_layers) != 3:
        raise UserError(f"Eagle3 captures three target layers, got {list(spec.capture_layers)}")


NGRAM_DEFAULT_SIZE = 3


def _check_ngram(spec: SpecConfig) -> None:
    if spec.ngram_size is not None and not 1 <= spec.ngram_size <= 16:
        raise UserError(f"ngram size (n) must be in 1..16, got {spec.ngram_size}")


register(
    SpecMethod(
        name="eagle3",
        summary="Eagle3 one-model: a draft head on the target's captured layers",
        worker="specdec_eval.workers.spec.eagle3:Eagle3OneModelWorker",
        draft_builder="specdec_eval.workers.spec.eagle3:build_eagle3_draft",
        options=("draft_model", "capture_layers", "draft_seed"),
        check=_check_eagle3,
        extra_kv_layers=1,
        draft_writes_kv_ahead=True,
        test_params=("one_model",),
        reference_name="Eagle3",
    )
)
register(
    SpecMethod(
        name="ngram",
        summary="prompt lookup: the K tokens that followed the last earlier match of the last n tokens; no draft model",
        worker="specdec_eval.workers.spec.ngram:NgramWorker",
        options=("ngram_size",),
        check=_check_ngram,
        reference_name="NGram",
    )
)

SPEC_ALGORITHMS: tuple[str, ...] = spec_methods()  # the methods shipped (the CLI's choices), before any test adds one
