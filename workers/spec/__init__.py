"""Speculative decoding's proposers: the exception-safe worker template (`base`) and one module per method (`eagle3`
with its draft head, `ngram`). Which token is kept is decided below, in the sampling package.

The method registry lives below the config (the engine's registries); `SPEC_ALGORITHMS`, `spec_method(name)` and
`spec_worker_class(name)` are offered here as well, for the engine and the test ids."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..registry import SPEC_ALGORITHMS, SpecMethod, register, spec_method, spec_methods

if TYPE_CHECKING:
    from .base import SpecWorkerBase

__all__ = ["SPEC_ALGORITHMS", "SpecMethod", "register", "spec_method", "spec_methods", "spec_worker_class"]


def spec_worker_class(algorithm: str) -> type[SpecWorkerBase]:
    return spec_method(algorithm).worker_class()
