"""Sequential verdicts (`run --early-stop`): documents are evaluated in a seeded random order, batch by batch, and
after each batch every gate that can already decide does:

- accuracy: the group-sequential test against the reference (`accuracy`) at the look n = documents
  done (always a prefix of the order, so every look is a random subset); PASS or FAIL stops the task. When the gate
  cannot fail at all (NO-GATE: its threshold sits at or below the floor at the full n) it never stops the task;
- lossless (a spec-dec run in float32/float64, against its baseline: the paired twin or a recorded run): the
  first sample whose tokens differ from the baseline's FAILs the task there;
- acceptance length: the conservative early tripwire (`acceptance.acceptance_early_fail`) FAILs a
  collapsed drafter after the first batch with enough draft cycles.

Per-sample scores come from lm-eval's own filters and metric on the task object (so they are exactly the scores
lm-eval computes at the end), and the run's recorded score is lm-eval's over the documents evaluated. A stopped
task records where and why: {"n": ..., "of": ..., "reason": ..., "gate": ...}.

**Several samples per document** (`--repeats R`): every count here is of documents. A document is done once all R
of its samples are scored (the adapter schedules them together), and the accuracy design judges the mean of the
per-document means (`accuracy` says why its variance model holds). The lossless stop compares each sample with the
baseline's of the same (task, document, repeat), and names the repeat. Progress records carry the repeat and R, so
that the `ab` watcher pairs a document only once both sides have all of its samples.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...results.run_summary import Verdict
from ...workers.spec.metrics import AcceptanceStats
from ..gates.acceptance import acceptance_early_fail
from ..gates.acceptance_gate import GATE as ACCEPTANCE
from ..gates.accuracy_gate import GATE as ACCURACY
from ..gates.lossless_gate import GATE as LOSSLESS
from ..run_types import EvalOptions
from .ab_channel import SideWait, progress_path
from .accuracy import AccuracySequentialDesign

DEFAULT_BATCH = EvalOptions.early_stop_batch  # documents per look: `run --early-stop-batch`'s default


def sample_score(task: Any, instance: Any, text: str, score_filter: str | None = None) -> float:
    """A sample's score on the 0-100 scale as the run scores it: lm-eval's exact_match under each of the task's
    filters (or only `score_filter`), averaged. `instance` is lm-eval's request; it is copied, never changed."""
    probe = copy.copy(instance)
    probe.resps, probe.filtered_resps = [text], {}
    values = []
    for ensemble in task._filters:  # lm-eval's filter pipelines of the task, as its evaluator applies them
        if score_filter is not None and ensemble.name != score_filter:
            continue
        ensemble.apply([probe])
        metrics = task.process_results(probe.doc, [probe.filtered_resps[ensemble.name]])
        values.append(float(metrics.get("exact_match", 0.0)))
    return 100.0 * sum(values) / len(values) if values else 0.0


Sample = tuple[int, int]  # (position of its document in the evaluation order, repeat)


@dataclass
class TaskProgress:
    """One task's sequential state: scores by (evaluation position, repeat), and the decision once there is one."""

    name: str
    n_max: int  # documents planned
    design: AccuracySequentialDesign | None
    repeats: int = 1  # samples per document
    scores: dict[Sample, float] = field(default_factory=dict)
    counts: dict[Sample, tuple[int, int]] = field(default_factory=dict)  # -> (draft cycles, accepted drafts)
    acceptance: AcceptanceStats | None = None
    stopped: dict[str, Any] | None = None
    looks: list[dict[str, Any]] = field(default_factory=list)
    decision: dict[str, Any] | None = None  # the accuracy design's last decision (final at a stop or at n_max)

    def is_complete(self, position: int) -> bool:
        """Every sample of the document at `position` is scored."""
        return all((position, r) in self.scores for r in range(self.repeats))

    @property
    def done(self) -> int:
        """Documents evaluated, all their samples, as a prefix of the order (a look needs an unbroken prefix)."""
        n = 0
        while self.is_complete(n):
            n += 1
        return n

    def document_score(self, position: int) -> float:
        """The mean score of a complete document's samples (its only sample's score with one per document)."""
        return sum(self.scores[(position, r)] for r in range(self.repeats)) / self.repeats

    def score_of_first(self, n: int) -> float:
        """The mean of the first n documents' scores (avg@repeats): what a look at n judges."""
        return sum(self.document_score(i) for i in range(n)) / n


class EarlyStop:
    """The run's sequential controller. `design_for(task, n_max)` gives a task's accuracy design (None without a
    reference); `acceptance_refs` and `test_id` serve the acceptance tripwire; `exact` says whether any divergence
    from the baseline fails (float32/float64)."""

    def __init__(
        self,
        design_for: Callable[[str, int], AccuracySequentialDesign | None],
        batch: int = DEFAULT_BATCH,
        test_id: str | None = None,
        acceptance_refs: dict | None = None,
        exact: bool = True,
        max_draft_len: int = 0,
        stop_file: str | None = None,
        temperatures: Mapping[str, float] | None = None,
        reference_ids: Mapping[str, str] | None = None,
    ) -> None:
        """stop_file (a side of a sequential `ab`): after each batch, every finished sample's score (and its
        acceptance counts) is appended to `<stop_file>.progress.jsonl`, and once `stop_file` exists every task
        stops, its content the reason. temperatures: what each task decodes at (absent: greedy), which the
        acceptance tripwire's reference must have been measured at; reference_ids: each task's acceptance reference
        key (a sampled task's names its decoding; absent: test_id)."""
        self.design_for = design_for
        self.batch = batch
        self.test_id = test_id
        self.acceptance_refs = acceptance_refs or {}
        self.exact = exact
        self.max_draft_len = max_draft_len
        self.stop_file = Path(stop_file) if stop_file else None
        self._watcher = SideWait(self.stop_file) if self.stop_file else None
        self.temperatures = dict(temperatures or {})
        self.reference_ids = dict(reference_ids or {})
        self.tasks: dict[str, TaskProgress] = {}
        self._reported: set[tuple[str, int, int]] = set()

    def start(self, task: str, n_max: int, repeats: int = 1) -> TaskProgress:
        """A task of n_max documents with `repeats` samples each."""
        if repeats < 1:
            raise ValueError(f"repeats must be at least 1, got {repeats}")
        acceptance = AcceptanceStats(self.max_draft_len) if self.max_draft_len else None
        design = self.design_for(task, n_max)
        if design is not None and (design.repeats, design.n_max) != (repeats, n_max):
            raise ValueError(
                f"{task}: the accuracy design is for {design.n_max} units of {design.repeats} samples, "
                f"the task has {n_max} documents of {repeats}"
            )
        self.tasks[task] = TaskProgress(task, n_max, design, repeats, acceptance=acceptance)
        return self.tasks[task]

    def is_open(self, task: str) -> bool:
        return self.tasks[task].stopped is None

    def observe(
        self,
        task: str,
        position: int,
        score: float,
        acceptance: dict | None,
        divergence: int | None,
        doc_id: Any,
        repeat: int = 0,
    ) -> None:
        """One finished sample: sample `repeat` of the document at `position`. divergence: the first token where it
        differs from the baseline's sample of the same document and repeat (None: identical or no baseline)."""
        t = self.tasks[task]
        if not 0 <= repeat < t.repeats:
            raise ValueError(f"{task}: repeat {repeat} of a task with {t.repeats} samples per document")
        t.scores[(position, repeat)] = score
        if acceptance and acceptance.get("num_cycles"):
            t.counts[(position, repeat)] = (int(acceptance["num_cycles"]), int(acceptance["num_accepted_drafts"]))
        if acceptance and t.acceptance is not None:
            t.acceptance.merge(AcceptanceStats.from_dict(acceptance))
        if divergence is not None and self.exact and t.stopped is None:
            sample = f"doc {doc_id}" + (f" sample {repeat}" if t.repeats > 1 else "")
            t.stopped = {
                "gate": LOSSLESS.name,
                "verdict": Verdict.FAIL,
                "n": None,
                "of": t.n_max,
                "doc_id": doc_id,
                **({"repeat": repeat} if t.repeats > 1 else {}),
                "reason": f"{sample} differs from the baseline at token {divergence} (any divergence "
                "fails in float32): stopped at the first divergent sample",
            }

    def after_batch(self, task: str) -> None:
        """A look, once the prefix of the order is complete up to the last batch boundary."""
        t = self.tasks[task]
        n = t.done
        if self.stop_file is not None:
            self._report(t)
            self._watcher.until_read(len(self._reported))  # the watcher looks at this batch first (`ab_channel`)
            if self.stop_file.exists() and t.stopped is None:
                reason = self.stop_file.read_text(encoding="utf-8").strip() or "the A/B decided"
                t.stopped = {"gate": "ab", "verdict": None, "n": n, "of": t.n_max, "reason": reason}
        if t.stopped is not None:
            t.stopped["n"] = t.stopped["n"] or n
            return
        if n == 0:
            return
        if t.acceptance is not None and self.test_id is not None:
            early = acceptance_early_fail(
                self.reference_ids.get(task, self.test_id),
                t.acceptance.to_dict(),
                self.acceptance_refs,
                temperature=self.temperatures.get(task, 0.0),
            )
            if early is not None:
                t.stopped = {
                    "gate": ACCEPTANCE.name,
                    "verdict": Verdict.FAIL,
                    "n": n,
                    "of": t.n_max,
                    "reason": early["reason"],
                }
                return
        if t.design is None or n not in t.design.looks:
            return
        decision = t.design.decide(n, t.score_of_first(n))
        t.decision = decision.to_dict()
        t.looks.append(t.decision)
        if decision.verdict in (Verdict.PASS, Verdict.FAIL) and n < t.n_max:
            t.stopped = {
                "gate": ACCURACY.name,
                "verdict": decision.verdict,
                "n": n,
                "of": t.n_max,
                "reason": decision.reason,
            }

    def _report(self, t: TaskProgress) -> None:
        """Each finished sample once: its document's position, its repeat and the samples per document, its score,
        the task's planned documents (`of`) and, under spec-dec, its draft cycles and accepted drafts (the sequential
        acceptance A/B pairs them by document: sequential.acceptance_ab)."""
        lines = []
        for position, repeat in sorted(t.scores):
            if (t.name, position, repeat) not in self._reported:
                self._reported.add((t.name, position, repeat))
                record = {
                    "task": t.name,
                    "position": position,
                    "repeat": repeat,
                    "repeats": t.repeats,
                    "score": t.scores[(position, repeat)],
                    "of": t.n_max,
                }
                if (position, repeat) in t.counts:
                    record["acceptance"] = list(t.counts[(position, repeat)])
                lines.append(json.dumps(record))
        if lines:
            with progress_path(self.stop_file).open("a", encoding="utf-8") as f:
                f.write("".join(line + "\n" for line in lines))

    def design_note(self, task: str) -> str | None:
        """How the task's accuracy design treats several samples per document (None: one sample, or no design)."""
        t = self.tasks.get(task)
        if t is None or t.design is None or t.repeats == 1:
            return None
        return f"sequential design: {t.design.variance_model()}"

    def accuracy_decision(self, task: str) -> dict[str, Any] | None:
        """The sequential accuracy verdict the task ended with (None without a design or a look)."""
        t = self.tasks.get(task)
        return t.decision if t is not None else None

    def record(self, task: str) -> dict[str, Any] | None:
        """What the summary says about the task's stop (None: it ran to the end)."""
        t = self.tasks.get(task)
        if t is None or t.stopped is None:
            return None
        return {**t.stopped, "looks": t.looks[-3:]}
