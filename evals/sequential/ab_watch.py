"""The sequential A/B of two commits (`specdec-eval ab ... --early-stop`): both sides evaluate the documents in the
same seeded random order, batch by batch, appending every finished sample's score (and, under spec-dec, its draft
cycles and accepted drafts) to their `stop_file`'s progress file. This watcher pairs the records in that order and
feeds two sequential tests:

- accuracy: the discordant pairs to the paired SPRT (`discordant_pairs`: B worse, no difference shown, or continue);
- acceptance, when both sides report acceptance counts: each task's per-document acceptance to the two one-sided
  group-sequential tests of `acceptance_ab` (a drop of B's AL shown, a drop of `drop` ruled out, or continue).

`decide_on`: "both" (the default) stops at once when either test shows B worse, else when every test that applies
has decided; "accuracy" or "acceptance" stops on that test alone. Each test keeps its own error rates; with both,
an unchanged B is called worse with probability at most the sum of their alphas. On a decision the watcher writes
each side's stop file; the sides stop at their next batch, record what they evaluated, and exit. A side waits after
each batch until the watcher has read it (`ab_channel`), so the decision falls at the look that carried it, however
fast the sides run; `compare` then pairs the two runs.

**Several samples per document** (`--repeats R`): the watcher pairs documents, never samples, once both sides have
all R of a document's samples. A document counts "B worse" when its mean score under B is below A's (stats.clustered
`document_signs`): under no difference each sign is a fair coin, so the SPRT's guarantee holds. Acceptance pairs
per document too, its counts summed over the document's samples."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...records import atomic_write
from ...stats.acceptance_ratio import DEFAULT_ALPHA, DEFAULT_BETA, DEFAULT_DROP, DROP, INCONCLUSIVE, NO_DROP
from ...stats.clustered import document_signs
from .ab_channel import acknowledge, progress_path
from .acceptance_ab import CONTINUE, AcceptanceSequentialDesign
from .discordant_pairs import B_WORSE, PairedDecision, PairedSequentialDesign

DECIDE_ON = ("both", "accuracy", "acceptance")

DocumentKey = tuple[str, int]  # (task, position of the document in the seeded order)


@dataclass(frozen=True)
class DocumentProgress:
    """A document one side finished: the score of each of its samples (by repeat), their draft cycles and accepted
    drafts summed (None: no sample of it drafted), and the documents the side planned for the task."""

    scores: tuple[float, ...]
    acceptance: tuple[int, int] | None = None
    of: int | None = None


@dataclass
class SideProgress:
    stop_file: Path

    read: int = 0  # how many of the side's records the last read found

    @property
    def progress_file(self) -> Path:
        return progress_path(self.stop_file)

    def records(self) -> dict[tuple[str, int, int], dict[str, Any]]:
        """(task, position in the order, repeat) -> the sample's record, of every sample the side reported so far (a
        torn last line of a side still writing is left for the next read; a record without a repeat is a document's
        only sample)."""
        out: dict[tuple[str, int, int], dict[str, Any]] = {}
        if not self.progress_file.exists():
            return out
        for line in self.progress_file.read_text(encoding="utf-8").splitlines():
            try:
                rec = json.loads(line)
                rec = {
                    **rec,
                    "score": float(rec["score"]),
                    "repeat": int(rec.get("repeat", 0)),
                    "repeats": int(rec.get("repeats", 1)),
                }
                out[(rec["task"], int(rec["position"]), rec["repeat"])] = rec
            except (ValueError, KeyError, TypeError):
                continue
        self.read = len(out)
        return out

    def documents(self) -> dict[DocumentKey, DocumentProgress]:
        """(task, position) -> the document, for every document all of whose samples the side reported."""
        samples: dict[DocumentKey, dict[int, dict[str, Any]]] = {}
        for (task, position, repeat), rec in self.records().items():
            samples.setdefault((task, position), {})[repeat] = rec
        return {key: doc for key, by_repeat in samples.items() if (doc := _document(by_repeat)) is not None}

    def stop(self, reason: str) -> None:
        atomic_write(self.stop_file, (reason + "\n").encode("utf-8"))  # a side never reads half a reason

    def acknowledge(self) -> None:
        """Tell the side that its records up to the last read were looked at (it waits for this: `ab_channel`)."""
        acknowledge(self.stop_file, self.read)


def _document(by_repeat: dict[int, dict[str, Any]]) -> DocumentProgress | None:
    """A document from its samples' records, or None while some of its samples are missing."""
    repeats = max(rec["repeats"] for rec in by_repeat.values())
    if sorted(by_repeat) != list(range(repeats)):
        return None
    records = [by_repeat[r] for r in range(repeats)]
    counts = [rec["acceptance"] for rec in records if rec.get("acceptance")]
    acceptance = (sum(int(c[0]) for c in counts), sum(int(c[1]) for c in counts)) if counts else None
    of = records[0].get("of")
    return DocumentProgress(tuple(rec["score"] for rec in records), acceptance, int(of) if of else None)


def common_prefix(a: dict[DocumentKey, Any], b: dict[DocumentKey, Any]) -> dict[str, list[tuple[Any, Any]]]:
    """Per task, (A's, B's) of each document along the common prefix of the order: both sides' unbroken prefix,
    where a side's document is there once all its samples are (a look needs both)."""
    out: dict[str, list[tuple[Any, Any]]] = {}
    for task in sorted({t for t, _ in a} | {t for t, _ in b}):
        position, pairs = 0, []
        while (task, position) in a and (task, position) in b:
            pairs.append((a[(task, position)], b[(task, position)]))
            position += 1
        out[task] = pairs
    return out


def discordant_in_order(a: dict[DocumentKey, DocumentProgress], b: dict[DocumentKey, DocumentProgress]) -> list[bool]:
    """B better (True) or worse (False) for every document whose mean score differs between the sides, task by
    task along the common prefix of the order."""
    out: list[bool] = []
    for pairs in common_prefix(a, b).values():
        signs = document_signs(
            {i: x.scores for i, (x, _) in enumerate(pairs)}, {i: y.scores for i, (_, y) in enumerate(pairs)}
        )
        out += [sign > 0 for sign in signs if sign]
    return out


def acceptance_in_order(
    a: dict[DocumentKey, DocumentProgress], b: dict[DocumentKey, DocumentProgress]
) -> dict[str, list[tuple[tuple[int, int], tuple[int, int]]]]:
    """Per task, ((cycles, accepted) of A, of B) per document, summed over its samples, along the common prefix of
    the order, for the documents where both sides drafted; tasks where neither side reported counts are left out."""
    out: dict[str, list] = {}
    for task, pairs in common_prefix(a, b).items():
        counted = [(x.acceptance, y.acceptance) for x, y in pairs]
        kept = [(ca, cb) for ca, cb in counted if ca and cb and ca[0] > 0 and cb[0] > 0]
        if kept:
            out[task] = kept
    return out


@dataclass
class AcceptanceMonitor:
    """The sequential acceptance test of every task both sides report acceptance for, each with its own design
    (looks every `batch` documents up to the task's planned count)."""

    batch: int
    drop: float = DEFAULT_DROP
    alpha: float = DEFAULT_ALPHA
    beta: float = DEFAULT_BETA
    designs: dict[str, AcceptanceSequentialDesign] = field(default_factory=dict)

    def scan(self, a: dict, b: dict, final: bool) -> dict[str, Any] | None:
        """The combined decision ({verdict, reason, tasks}), or None while no task has paired acceptance: DROP as
        soon as a task shows one, NO-DROP once every task ruled one out, INCONCLUSIVE when the sides ended with a
        task undecided, else CONTINUE."""
        tasks = acceptance_in_order(a, b)
        if not tasks:
            return None
        decisions = {}
        for task, pairs in tasks.items():
            planned = max(a[(task, 0)].of or len(pairs), len(pairs), 2)
            design = self.designs.get(task)
            if design is None:
                design = AcceptanceSequentialDesign.for_batches(
                    planned, self.batch, drop=self.drop, alpha=self.alpha, beta=self.beta
                )
                self.designs[task] = design
            decisions[task] = design.scan(pairs, final=final)
        verdicts = {d.verdict for d in decisions.values()}
        if DROP in verdicts:
            verdict = DROP
        elif verdicts == {NO_DROP}:
            verdict = NO_DROP
        elif CONTINUE in verdicts:
            verdict = CONTINUE
        else:
            verdict = INCONCLUSIVE
        reason = "; ".join(f"{task}: {d.reason}" for task, d in decisions.items())
        return {"verdict": verdict, "reason": reason, "tasks": {t: d.to_dict() for t, d in decisions.items()}}


def should_stop(accuracy: PairedDecision, acceptance: dict[str, Any] | None, decide_on: str) -> bool:
    """Whether the two tests' decisions so far end the A/B (see the module docstring)."""
    if decide_on not in DECIDE_ON:
        raise ValueError(f"decide_on must be one of {', '.join(DECIDE_ON)}, got {decide_on!r}")
    acceptance_final = acceptance is not None and acceptance["verdict"] != CONTINUE
    if decide_on == "accuracy":
        return accuracy.final
    if decide_on == "acceptance":
        return acceptance_final
    worse = accuracy.verdict == B_WORSE or (acceptance is not None and acceptance["verdict"] == DROP)
    return worse or (accuracy.final and (acceptance is None or acceptance_final))


def watch(
    sides: dict[str, SideProgress],
    design: PairedSequentialDesign,
    running,
    poll_s: float = 0.5,
    acceptance: AcceptanceMonitor | None = None,
    decide_on: str = "both",
) -> dict:
    """Poll both sides' progress until the tests decide (then stop both) or both sides end (then decide on what
    they evaluated). running(): whether any side's process is still alive. Returns the decision's record: the
    accuracy test's fields at the top (as before), the acceptance test's under "acceptance"."""
    a, b = sides["A"], sides["B"]
    while True:
        alive = running()
        documents_a, documents_b = a.documents(), b.documents()
        pairs = discordant_in_order(documents_a, documents_b)
        decision = design.scan(pairs, final=not alive)
        accepted = acceptance.scan(documents_a, documents_b, final=not alive) if acceptance is not None else None
        if should_stop(decision, accepted, decide_on) or not alive:
            break
        for side in sides.values():  # each side waits after a batch until this read of it (`ab_channel`)
            side.acknowledge()
        time.sleep(poll_s)
    if alive:
        reason = f"sequential A/B decided {decision.verdict} after {decision.n_pairs} discordant pairs: "
        reason += decision.reason
        if accepted is not None:
            reason += f"; acceptance {accepted['verdict']}: {accepted['reason']}"
        for side in sides.values():
            side.stop(reason)
    # the pairs the decision rests on (scan stops at the first crossing), and those seen by then
    return {
        **decision.to_dict(),
        "discordant_pairs": decision.n_pairs,
        "pairs_seen": len(pairs),
        "stopped_sides": alive,
        "decide_on": decide_on,
        "acceptance": accepted,
    }


def render(record: dict[str, Any]) -> str:
    how = "stopped both sides" if record["stopped_sides"] else "both sides ran to the end"
    lines = [
        f"sequential A/B: {record['verdict']} after {record['discordant_pairs']} discordant pairs ({how}): "
        f"{record['reason']}"
    ]
    accepted = record.get("acceptance")
    if accepted:
        lines.append(f"sequential acceptance: {accepted['verdict']}: {accepted['reason']}")
    return "\n".join(lines)
