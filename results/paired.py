"""Sample-by-sample pairing of two runs: the exact McNemar test and where two generations part ways.

Two runs of the same evaluation see the same documents, so their per-sample correctness is paired data. Only the
discordant pairs carry information about a difference: b (A right, B wrong) and c (A wrong, B right). Under
"no difference" each discordant pair is a fair coin, so min(b, c) is compared with Bin(b + c, 1/2).

Per-document acceptance is paired the same way, by its own test (stats.acceptance_ratio).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

    from .sample_record import SampleRecord


def first_divergence(a_ids: Sequence[int] | None, b_ids: Sequence[int] | None) -> int | None:
    """Index of the first token where two outputs differ; the shorter length if one is a prefix of the other;
    None if they are identical."""
    a, b = list(a_ids or []), list(b_ids or [])
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


class PairedSamples(dict):
    """task -> [(sample of A, sample of B), ...] ordered by doc id (then repeat), tasks in A's order.

    `unpaired` holds, per task, the doc ids that only one run has: {task: {"only_a": [...], "only_b": [...]}}
    (tasks where every doc paired are left out).
    """

    def __init__(self) -> None:
        super().__init__()
        self.unpaired: dict[str, dict[str, list[Any]]] = {}


def _keys(samples: list[SampleRecord], which: str) -> pd.DataFrame:
    """The join keys of a run's samples (task, doc_id, repeat: 0 for a run with one sample per document), their
    prompt hashes and their place in the list."""
    import pandas as pd

    column = lambda values: pd.Series(list(values), dtype=object)  # noqa: E731  ints and strs as the store has them
    frame = pd.DataFrame(
        {
            "task": column(s.task for s in samples),
            "doc_id": column(s.doc_id for s in samples),
            "repeat": column(int(s.repeat or 0) for s in samples),
            "prompt_hash": column(s.prompt_hash for s in samples),
            "row": range(len(samples)),
        }
    )
    twice = frame.duplicated(["task", "doc_id", "repeat"])
    if twice.any():
        task, doc, repeat = frame.loc[twice.idxmax(), ["task", "doc_id", "repeat"]]
        which_sample = f"doc {doc}" + (f" repeat {repeat}" if repeat else "")
        raise ValueError(f"run {which} holds task {task!r} {which_sample} twice; its samples are corrupt")
    return frame


def pair_samples(samples_a: Iterable[SampleRecord], samples_b: Iterable[SampleRecord]) -> PairedSamples:
    """Join two runs' samples on (task, doc_id, repeat), as `frames.paired_frame` does: with several samples
    per document, sample r of a document in A pairs with sample r in B (the same seed).

    Raises ValueError when a pair's prompt_hash differs: the runs prompted the model differently (other few-shot
    examples, chat template, data), so their samples are not comparable. Docs present in only one run are left
    out of the pairs and listed in the result's `unpaired`.
    """
    import pandas as pd

    from .frames import paired_frame

    a, b = list(samples_a), list(samples_b)
    keys_a, keys_b = _keys(a, "A"), _keys(b, "B")
    joined = paired_frame(keys_a, keys_b)
    both = joined[joined["side"] == "both"]
    ha, hb = both["prompt_hash_a"], both["prompt_hash_b"]
    differs = both[~((ha == hb) | (ha.isna() & hb.isna()))]
    if len(differs):
        first = differs.iloc[0]
        shown = (str(first[f"prompt_hash_{side}"])[:12] for side in "ab")
        raise ValueError(
            f"{len(differs)} paired sample(s) have different prompts (first: task {first['task']!r} doc "
            f"{first['doc_id']}, prompt_hash {' vs '.join(shown)}); the runs used different prompts and cannot be "
            "compared sample by sample"
        )
    pairs = PairedSamples()
    for task in pd.unique(pd.concat([keys_a["task"], keys_b["task"]])):
        rows = joined[joined["task"] == task]
        matched = sorted(rows[rows["side"] == "both"].itertuples(), key=lambda r: (_doc_order(r.doc_id), r.repeat))
        if matched:
            pairs[task] = [(a[int(r.row_a)], b[int(r.row_b)]) for r in matched]
        only_a, only_b = (sorted(set(rows.loc[rows["side"] == side, "doc_id"]), key=_doc_order) for side in "ab")
        if only_a or only_b:
            pairs.unpaired[task] = {"only_a": only_a, "only_b": only_b}
    return pairs


def _doc_order(doc_id: Any) -> tuple[int, Any]:
    return (0, doc_id) if isinstance(doc_id, int) else (1, str(doc_id))


def groups_of(samples: Sequence[SampleRecord], filter: str, scale: float = 100.0) -> dict[Any, list[float]]:
    """One task's sample records grouped by document: doc_id -> their correctness under `filter` (scale for True)."""
    out: dict[Any, list[float]] = {}
    for s in samples:
        out.setdefault(s.doc_id, []).append(scale if s.correct.get(filter) else 0.0)
    return out
