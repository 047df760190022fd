"""Which documents a run evaluates, and in which order: the first N, a seeded random subset, or all of them in a
seeded random order (what a sequential verdict needs: every prefix of the order is a random subset).

**The order.** Document i of a task with n_total documents gets the key sha256(f"{seed}:{key}:{i}"); the
documents are evaluated in increasing key order. The keys depend on nothing but (seed, key, i): the same order
on every rank, every run and every platform (numpy's generators promise no stream across versions; a hash
does). A random subset of N is the first N of that order, so subsets are nested: the documents of
`--limit 200 --sample random` are those a sequential run has seen when it stops at 200.

**Handing it to lm-eval 0.4.13.** `simple_evaluate(..., samples={task_name: ids})` (exclusive with `limit`) keeps the
documents whose index is in `ids`, in dataset order. `SubsetPlan` handles what follows: `Instance.doc_id` is then the
position within the subset (`SubsetPlan.doc_id` maps it back, `SubsetPlan.order_key` gives the evaluation position);
lm-eval's logged `doc_id` is `ids[position]`, right only for sorted `ids` (`SubsetPlan.samples` is sorted); an empty
list would mean "all documents", so a plan holds at least one. The evaluation order itself is the adapter's.

**Few-shot prompts depend on position.** lm-eval's default few-shot sampler (GSM8K's) draws shots from one seeded
generator in request order, so the k-th document of a subset gets the shots of the k-th document of a full run
(lm-eval 0.4.13: document 10 of {5, 10, 15} carries document 1's shots). Two subset runs of the same seed and N
prompt identically and the score stays unbiased, but a subset run must not be paired sample by sample with a full
run, and a run stopped early prompts differently from `--limit N --sample random`.

**Why not the first N.** The first documents of a file are not a random sample: the embedded default scores 0.50 on
GSM8K's first 100 and 1.18 on all 1319. TensorRT-LLM's evaluators likewise shuffle with a fixed seed before taking
num_samples.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from ...errors import UserError

HOW = ("all", "first", "random")


def random_order(n_total: int, seed: int, key: str = "") -> list[int]:
    """Document indices 0..n_total-1 in the seeded order described above (`key`: the task, so that two tasks of
    the same size are not shuffled alike)."""
    if n_total < 0:
        raise ValueError(f"a task cannot have {n_total} documents")
    prefix = f"{int(seed)}:{key}:".encode()
    return sorted(range(n_total), key=lambda i: hashlib.sha256(prefix + str(i).encode()).digest())


@dataclass(frozen=True)
class SubsetPlan:
    """The documents of one task a run evaluates (`order`, in evaluation order) and how to ask lm-eval for them."""

    task: str
    n_total: int
    how: str  # all | first | random
    seed: int | None  # None for "first"
    order: tuple[int, ...]
    _position: dict[int, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_position", {doc: i for i, doc in enumerate(self.order)})

    @property
    def n(self) -> int:
        return len(self.order)

    @property
    def samples(self) -> list[int]:
        """The document indices, sorted: what `simple_evaluate(samples={task: ...})` needs."""
        return sorted(self.order)

    def lm_eval_kwargs(self, lm_eval_task: str) -> dict[str, Any]:
        """Keyword arguments for simple_evaluate: `samples` for a random subset, `limit` for the first N, none when
        the plan holds every document (then Instance.doc_id is the document index, whatever the order)."""
        if self.n == self.n_total:
            return {}
        return {"samples": {lm_eval_task: self.samples}} if self.how == "random" else {"limit": self.n}

    def doc_id(self, instance_doc_id: int) -> int:
        """The document index of an lm-eval Instance.doc_id (a position within `samples` for a random plan)."""
        return self.samples[instance_doc_id] if self.how == "random" and self.n < self.n_total else instance_doc_id

    def order_key(self, instance_doc_id: int) -> int:
        """Where the Instance's document comes in the evaluation order: sort requests by this."""
        return self._position[self.doc_id(instance_doc_id)]

    def position(self, doc_id: int) -> int:
        """Where document `doc_id` comes in the evaluation order."""
        return self._position[doc_id]

    def to_dict(self) -> dict[str, Any]:
        """What the manifest records: enough to rebuild the plan, and the order itself with its digest."""
        digest = hashlib.sha256(",".join(map(str, self.order)).encode()).hexdigest()
        return {
            "task": self.task,
            "n_total": self.n_total,
            "n": self.n,
            "how": self.how,
            "seed": self.seed,
            "order_sha256": digest,
            "order": list(self.order),
        }


def plan_subset(task: str, n_total: int, limit: int | None = None, sample: str = "first", seed: int = 0) -> SubsetPlan:
    """The plan for `--limit N --sample first|random` (limit None: every document; with `random`, all of them in
    the seeded order). A limit above the task's size takes the whole task."""
    if sample not in ("first", "random"):
        raise UserError(f"unknown --sample '{sample}'; known: first, random")
    if limit is not None and limit < 1:
        raise UserError(f"--limit must be at least 1, got {limit}")
    if n_total < 1:
        raise UserError(f"task {task} has no documents")
    n = n_total if limit is None else min(limit, n_total)
    if sample == "random":
        return SubsetPlan(task, n_total, "random", int(seed), tuple(random_order(n_total, seed, task)[:n]))
    return SubsetPlan(task, n_total, "first" if n < n_total else "all", None, tuple(range(n)))


def subset_note(n: int, n_total: int, how: str) -> str | None:
    """What the reference gate says when a run of n of n_total documents is compared with a full-set reference;
    None for the full set."""
    if how not in HOW:
        raise ValueError(f"unknown subset kind '{how}'; known: {', '.join(HOW)}")
    if n >= n_total:
        return None
    share = f"{n} of {n_total} documents ({n / n_total:.0%})"
    if how == "first":
        return (
            f"subset: the first {share} against a full-set reference. The first documents are not a random "
            "sample (first-N subsets are reported easier, e.g. GSM8K's first 200): this verdict may not hold "
            "for the full set; use --sample random for a subset the reference describes"
        )
    return (
        f"subset: a seeded random {share} against a full-set reference. It is an unbiased sample, so the "
        f"gate applies at n = {n} (a wider threshold than the full set's)"
    )
