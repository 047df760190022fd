"""Acceptance paired by document, read from run records: each document's draft cycles and accepted drafts on each
side (or its acceptance length alone, for runs recorded before the counts existed), and several samples of one
document merged into one pair. The paired test on those counts is statistics (stats.acceptance_ratio)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..stats.acceptance_ratio import Counts
from .sample_record import SampleRecord


def _recorded(sample: SampleRecord | Mapping[str, Any], name: str) -> Any:
    """A stored sample's field (`SampleRecord`), or a sequential test's progress record key."""
    return sample.get(name) if isinstance(sample, Mapping) else getattr(sample, name, None)


def doc_counts(sample: SampleRecord | Mapping[str, Any]) -> Counts | None:
    """(cycles, accepted drafts) of one sample from its recorded counts; None when it has none or drafted nothing."""
    counts = _recorded(sample, "acceptance")
    if isinstance(counts, Mapping) and _finite(counts.get("num_cycles")) and counts["num_cycles"] > 0:
        accepted = counts.get("num_accepted_drafts")
        if _finite(accepted):
            return float(counts["num_cycles"]), float(accepted)
    return None


def doc_length(sample: SampleRecord | Mapping[str, Any]) -> float | None:
    al = _recorded(sample, "acceptance_length")
    return float(al) if _finite(al) and al >= 1 else None


def paired_counts(
    pairs: Iterable[tuple[SampleRecord | Mapping[str, Any], SampleRecord | Mapping[str, Any]]],
) -> tuple[list[tuple[Counts, Counts]], bool]:
    """The pairs' per-document counts ((A's, B's) per document where both sides drafted), and whether they are
    cycle-weighted: when a side recorded no counts for some document, every document falls back to its AL alone
    (weight one each), so that the two kinds never mix."""
    pairs = list(pairs)
    counted = [(doc_counts(x), doc_counts(y)) for x, y in pairs]
    both = [(a, b) for a, b in counted if a is not None and b is not None]
    lengths = [(doc_length(x), doc_length(y)) for x, y in pairs]
    with_length = [(a, b) for a, b in lengths if a is not None and b is not None]
    if both and len(both) >= len(with_length):
        return both, True
    return [((1.0, a - 1.0), (1.0, b - 1.0)) for a, b in with_length], False


def by_document(
    pairs: Iterable[tuple[SampleRecord, SampleRecord]],
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Pairs of samples with several per document (--repeats) merged into one pair per document, in first-seen order:
    each side's draft cycles and accepted drafts summed over the document's samples that drafted, its AL the mean of
    theirs. The documents are the paired test's units: the samples of one document are not independent."""
    documents: dict[tuple[str, Any], tuple[list[SampleRecord], list[SampleRecord]]] = {}
    for x, y in pairs:
        a, b = documents.setdefault((x.task, x.doc_id), ([], []))
        a.append(x)
        b.append(y)
    return [(_merged(a), _merged(b)) for a, b in documents.values()]


def _merged(samples: Sequence[SampleRecord]) -> dict[str, Any]:
    """One document's samples as one record of the kind doc_counts and doc_length read."""
    counts = [c for c in map(doc_counts, samples) if c is not None]
    lengths = [x for x in map(doc_length, samples) if x is not None]
    merged: dict[str, Any] = {}
    if counts:
        cycles, accepted = sum(c for c, _ in counts), sum(a for _, a in counts)
        merged["acceptance"] = {"num_cycles": cycles, "num_accepted_drafts": accepted}
    if lengths:
        merged["acceptance_length"] = sum(lengths) / len(lengths)
    return merged


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
