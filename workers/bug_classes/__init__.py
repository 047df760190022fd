"""The planted bug classes, each declared once: its name (what `--inject` takes), where it acts in the engine, the
gate that must catch it, and one line of help. The `--inject` help, the fault lists (`faults`), the planted parts the
engine build swaps in (`planted`), the selftest matrix and the docs' table of classes all read this registry; the
vLLM matrix's classes (planted in vLLM by a test-only plugin) are declared beside them, in `vllm`.

The classes built into the engine's planted parts are declared in `builtin`; a new class is one module here that
declares a `PlantedClass` named CLASS and carries its own code (an `after_verify` edit of the verified tokens): the
registry finds it by listing this package. Nothing here imports torch: parsing `--inject` needs none."""

from __future__ import annotations

import importlib
import pkgutil

from .builtin import BUILTIN
from .declaration import CATCHERS, WHERE, AfterVerify, PlantedClass
from .vllm import VLLM_CLASSES


def _found() -> tuple[PlantedClass, ...]:
    found = list(BUILTIN)
    for module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
        declared = getattr(importlib.import_module(f"{__name__}.{module}"), "CLASS", None)
        if isinstance(declared, PlantedClass):
            found.append(declared)
    names = [c.name for c in found]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"planted classes declared twice: {', '.join(twice)}")
    return tuple(found)


PLANTED_CLASSES: tuple[PlantedClass, ...] = _found()
BY_NAME = {c.name: c for c in PLANTED_CLASSES}


def names(where: str | None = None, recurring: bool | None = None) -> tuple[str, ...]:
    """The classes' names, in declaration order: those acting in `where`, those (not) recurring."""
    return tuple(
        c.name
        for c in PLANTED_CLASSES
        if (where is None or where in c.acts_in) and (recurring is None or c.recurring == recurring)
    )


def inject_help() -> str:
    """The planted classes as `--inject`'s help lists them: the coupled engine's, then the rejection sampler's."""
    coupled = ", ".join(c.name for c in PLANTED_CLASSES if c.spec_sampling != "rejection")
    rejection = ", ".join(c.name for c in PLANTED_CLASSES if c.spec_sampling == "rejection")
    return f"a planted bug class: {coupled}, or a sampled class of --spec-sampling rejection: {rejection}"


def markdown_table() -> str:
    """The docs' table of planted classes (one row each, in declaration order)."""
    rows = ["| class | acts in | caught by | at T > 0 only | what it does |", "|---|---|---|---|---|"]
    for c in PLANTED_CLASSES:
        where = ", ".join(c.acts_in)
        sampler = " (rejection sampler)" if c.spec_sampling == "rejection" else ""
        rows.append(f"| `{c.name}` | {where} | {c.catcher} | {'yes' if c.sampled else 'no'}{sampler} | {c.help} |")
    return "\n".join(rows) + "\n"


def vllm_markdown_table() -> str:
    """The docs' table of the vLLM matrix's classes (`VLLM_CLASSES`, in the matrix's order)."""
    rows = ["| class | planted at | what it does | caught by |", "|---|---|---|---|"]
    rows += [f"| `{c.name}` | {c.planted_at} | {c.help} | {c.catcher} |" for c in VLLM_CLASSES]
    return "\n".join(rows) + "\n"


__all__ = [
    "BY_NAME",
    "AfterVerify",
    "CATCHERS",
    "PLANTED_CLASSES",
    "VLLM_CLASSES",
    "WHERE",
    "PlantedClass",
    "inject_help",
    "markdown_table",
    "names",
    "vllm_markdown_table",
]
