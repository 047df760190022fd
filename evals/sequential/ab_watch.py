"""The sequential A/B of two commits (`specdec-eval ab ... --early-stop`): both sides run at once, each evaluating
the documents in the same seeded random order batch by batch and appending every finished sample's score to a
progress file (evals/sequential/early_stop.py, `stop_file`). This watcher pairs the two sides' scores in that order
and feeds the discordant pairs to the sequential paired test (discordant_pairs.py, an SPRT on the sign of the
differences: B worse, no difference shown, or continue). When it decides, it writes each side's stop file; the
sides stop at their next batch, record what they evaluated, and exit; `compare` then pairs the two runs."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .discordant_pairs import PairedDecision, PairedSequentialDesign


@dataclass
class SideProgress:
    stop_file: Path

    @property
    def progress_file(self) -> Path:
        return self.stop_file.with_name(self.stop_file.name + ".progress.jsonl")

    def scores(self) -> dict[tuple[str, int], float]:
        """(task, position in the order) -> score, of every sample the side reported so far (a torn last line of a
        side still writing is left for the next read)."""
        out: dict[tuple[str, int], float] = {}
        if not self.progress_file.exists():
            return out
        for line in self.progress_file.read_text(encoding="utf-8").splitlines():
            try:
                rec = json.loads(line)
                out[(rec["task"], int(rec["position"]))] = float(rec["score"])
            except (ValueError, KeyError, TypeError):
                continue
        return out

    def stop(self, reason: str) -> None:
        self.stop_file.write_text(reason + "\n", encoding="utf-8")


def discordant_in_order(a: dict, b: dict) -> list[bool]:
    """B better (True) or worse (False) for every pair where the scores differ, task by task along the common
    prefix of the order (a look needs both sides' unbroken prefix)."""
    out: list[bool] = []
    for task in sorted({t for t, _ in a} | {t for t, _ in b}):
        position = 0
        while (task, position) in a and (task, position) in b:
            sa, sb = a[(task, position)], b[(task, position)]
            if sa != sb:
                out.append(sb > sa)
            position += 1
    return out


def watch(sides: dict[str, SideProgress], design: PairedSequentialDesign, running, poll_s: float = 2.0) -> dict:
    """Poll both sides' progress until the test decides (then stop both) or both sides end (then decide on what
    they evaluated). running(): whether any side's process is still alive. Returns the decision's record."""
    a, b = sides["A"], sides["B"]
    decision: PairedDecision | None = None
    while True:
        alive = running()
        pairs = discordant_in_order(a.scores(), b.scores())
        decision = design.scan(pairs, final=not alive)
        if decision.final or not alive:
            break
        time.sleep(poll_s)
    if alive:
        reason = (
            f"sequential A/B decided {decision.verdict} after {decision.n_pairs} discordant pairs: {decision.reason}"
        )
        for side in sides.values():
            side.stop(reason)
    # the pairs the decision rests on (scan stops at the first crossing), and those seen by then
    return {
        **decision.to_dict(),
        "discordant_pairs": decision.n_pairs,
        "pairs_seen": len(pairs),
        "stopped_sides": alive,
    }


def render(record: dict[str, Any]) -> str:
    how = "stopped both sides" if record["stopped_sides"] else "both sides ran to the end"
    return (f"sequential A/B: {record['verdict']} after {record['discordant_pairs']} discordant pairs ({how}): "
            f"{record['reason']}")  # fmt: skip
