"""Every gate's declaration (`GateDeclaration`), in the order a run is judged by them: one line per gate, the module
here that declares it. Readers find a gate here by name or by the key summary.json keeps its record under; evals/gates
finds each one's judging module from it. A new gate is its declaration module, its judging module and one line here."""

from __future__ import annotations

import importlib
from functools import cache

from .declaration import GateDeclaration

DECLARED = (
    "accuracy",
    "lossless",
    "acceptance",
    "truncated",
)


@cache
def declarations() -> tuple[GateDeclaration, ...]:
    return tuple(importlib.import_module(f"{__name__}.{m}").GATE for m in DECLARED)


def recorded() -> tuple[GateDeclaration, ...]:
    """The gates whose record is kept under a key of their own (every one but the accuracy test)."""
    return tuple(d for d in declarations() if d.key is not None)


def by_key(key: str) -> GateDeclaration | None:
    return next((d for d in recorded() if d.key == key), None)


def shown(declaration: GateDeclaration, present: bool) -> bool:
    """Whether a reader gives the gate a column: always, unless it is opt-in and no run shown recorded it."""
    return present or not declaration.opt_in
