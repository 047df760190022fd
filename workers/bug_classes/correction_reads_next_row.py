"""correction_reads_next_row: where verification rejects a draft, the target's correction token is read from the
logits row after the rejection (the target's prediction given the rejected draft) instead of the row at it: an
off-by-one in the row index of the correction, the sibling of an accept test that reads its neighbour's row. The
same number of tokens is emitted, so the KV bookkeeping and the acceptance counters stay consistent; the outputs
change wherever the two rows disagree, so the lossless gate must FAIL it. Greedy requests only (the row's argmax):
a one-module class, it needs no sampler of its own.

A class declared in its own module: this file is all it takes (the registry finds CLASS; the planted verifier runs
its `after_verify`)."""

from __future__ import annotations

from typing import Any

from .declaration import LOSSLESS, PlantedClass

NAME = "correction_reads_next_row"


def _after_verify(items: Any, logits: Any, emitted: list[list[int]], faults: Any, step: int) -> list[list[int]]:
    """Each greedy generation request that rejected a draft gets the next row's argmax as its correction."""
    out, row = emitted, 0
    for r, item in enumerate(items):
        width = 1 if item.is_context else item.num_new_tokens  # rows of logits this request verifies
        first, row = row, row + width
        if item.is_context or not item.request.sampling.greedy:
            continue
        accepted = len(emitted[r]) - 1
        if accepted >= width - 1:  # every draft accepted: its last token is the bonus, not a correction
            continue
        late = int(logits[first + accepted + 1].argmax())
        if late == emitted[r][-1] or not faults.due(NAME, step):
            continue
        out = [list(e) for e in out] if out is emitted else out
        out[r] = emitted[r][:-1] + [late]
    return out


CLASS = PlantedClass(
    NAME,
    ("verifier",),
    LOSSLESS,
    "a rejected draft's correction token is read from the next logits row (greedy)",
    after_verify=_after_verify,
)
