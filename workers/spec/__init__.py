"""Speculative decoding: the Eagle3 draft head, verification, and the exception-safe spec-dec workers.

`SPEC_WORKERS` is the registry of algorithms (the config's validation and the CLI's choices come from it)."""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING

from ..errors import UserError

if TYPE_CHECKING:
    from .base import SpecWorkerBase

# name -> "module:class", imported when first used (the config validates names without importing torch models)
_WORKERS = MappingProxyType({"eagle3": "specdec_eval.workers.spec.eagle3:Eagle3OneModelWorker"})
SPEC_ALGORITHMS: tuple[str, ...] = tuple(_WORKERS)


def spec_worker_class(algorithm: str) -> type[SpecWorkerBase]:
    import importlib

    try:
        module, name = _WORKERS[algorithm].split(":")
    except KeyError:
        raise UserError(f"unknown spec-dec algorithm {algorithm!r} (known: {', '.join(SPEC_ALGORITHMS)})") from None
    return getattr(importlib.import_module(module), name)
