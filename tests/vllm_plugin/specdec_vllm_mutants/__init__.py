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
# The classes this plugin implements. Each is declared (help, gate, where it is planted) in the product's planted-class
# registry, which this venv does not have; a test holds these names to that declaration.
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
    selection = Selection(value)  # an unknown class stops every process now, at start-up
    from vllm.platforms import current_platform

    # Right after loading plugins, a vLLM worker swaps Triton kernels for the platform's by scanning every loaded
    # module; importing the sampler and proposers before that scan breaks it (seen on 0.32's CPU build), so the
    # patches go in once it is done.
    swap_kernels = current_platform.register_triton_kernel_overrides

    def swap_kernels_then_plant() -> None:
        swap_kernels()
        from . import patches

        patches.install(selection)

    current_platform.register_triton_kernel_overrides = swap_kernels_then_plant
