"""The draft vocabulary: the target ids the target itself predicts most often in the training data.

Stored as the published heads do: `d2t[i] = used[i] - i` (target id = draft id + d2t[draft id]) with `used`
sorted ascending. A label outside the draft vocabulary can never be proposed, so it is left out of the loss.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch


def draft_vocab(labels: Iterable[torch.Tensor], target_vocab: int, size: int) -> torch.Tensor:
    """Sorted target ids of the `size` most frequent labels (ties broken by lower id, so it is deterministic)."""
    counts = torch.zeros(target_vocab, dtype=torch.int64)
    for lab in labels:
        counts += torch.bincount(lab.to(torch.int64), minlength=target_vocab)
    size = min(size, target_vocab)
    # stable ordering: sort by count descending, then id ascending
    order = sorted(range(target_vocab), key=lambda i: (-int(counts[i]), i))[:size]
    return torch.tensor(sorted(order), dtype=torch.int64)


def coverage(labels: Iterable[torch.Tensor], used: torch.Tensor, target_vocab: int) -> float:
    """Fraction of labels the draft vocabulary can express (the ceiling on position-0 acceptance)."""
    member = torch.zeros(target_vocab, dtype=torch.bool)
    member[used] = True
    hit = total = 0
    for lab in labels:
        hit += int(member[lab.to(torch.int64)].sum())
        total += len(lab)
    return hit / total if total else 0.0


def target_to_draft(used: torch.Tensor, target_vocab: int) -> torch.Tensor:
    """[target_vocab] draft id of each target id, -100 (cross-entropy's ignore index) when absent."""
    t2d = torch.full((target_vocab,), -100, dtype=torch.int64)
    t2d[used] = torch.arange(len(used))
    return t2d


def d2t_offsets(used: torch.Tensor) -> torch.Tensor:
    return used - torch.arange(len(used))
