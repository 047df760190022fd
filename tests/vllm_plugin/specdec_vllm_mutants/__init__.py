"""Bugs planted in a real vLLM server, for `specdec-eval selftest --mutants --engine vllm` (test-only).

vLLM calls `register` in each of its processes. With SPECDEC_EVAL_VLLM_MUTANT unset (or empty) it returns at once
and vLLM runs untouched. Set, it names the class to plant, or "@PATH": a file naming the class, read again at each
speculative step (an empty or missing file plants nothing), so one server can serve every class in turn. An
unknown class stops the server at start-up, naming the known ones."""

from __future__ import annotations

import os
from pathlib import Path

from .edits import ROW_EDITS

ENV = "SPECDEC_EVAL_VLLM_MUTANT"
CLASSES = (*ROW_EDITS, "bonus_wrong_row", "draft_never_matches", "oom_first_spec_step")


class Selection:
    """Which class is live now: a fixed name, or the name a file holds at this moment."""

    def __init__(self, value: str) -> None:
        self.file = Path(value[1:]) if value.startswith("@") else None
        self.fixed = None if self.file else check(value)

    def current(self) -> str | None:
        if self.file is None:
            return self.fixed
        try:
            name = self.file.read_text().strip()
        except FileNotFoundError:
            return None
        return check(name) if name else None


def check(name: str) -> str:
    if name not in CLASSES:
        raise ValueError(f"{ENV}: unknown class {name!r} (known: {', '.join(CLASSES)})")
    return name


def register() -> None:
    value = os.environ.get(ENV, "").strip()
    if not value:
        return
    from . import patches

    patches.install(Selection(value))
