"""Speculative decoding: the method registry (registry.py), the exception-safe worker template (base.py), the
verification rule every method shares (verify.py), and one module per method (eagle3.py with its draft head,
ngram.py).

`SPEC_ALGORITHMS` lists the methods shipped at import (the CLI's choices); `spec_method(name)` is the entry the
config, the engine and the test ids consult."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .registry import SpecMethod, register, spec_method, spec_methods

if TYPE_CHECKING:
    from .base import SpecWorkerBase

SPEC_ALGORITHMS: tuple[str, ...] = spec_methods()

__all__ = ["SPEC_ALGORITHMS", "SpecMethod", "register", "spec_method", "spec_methods", "spec_worker_class"]


def spec_worker_class(algorithm: str) -> type[SpecWorkerBase]:
    return spec_method(algorithm).worker_class()
