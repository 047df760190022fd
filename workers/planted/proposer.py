"""The proposer-side planted bugs:
draft_reads_neighbour_hidden  when the draft proposes for a batch of more than one request, each request's draft
                      reads its neighbour's hidden states (the requests' rows rolled by one: request r reads request
                      r + 1's, the last the first's). At batch 1 it is exactly the clean engine. The target still
                      verifies every draft, so greedy outputs stay lossless; only acceptance falls, and only at
                      batch > 1 (a draft indexing bug a single-request check never sees)
draft_kv_into_target  the Eagle3 draft layer writes (and reads) its KV in the target's last KV layer instead of its
                      own. The prompt's KV blocks are shared with the paired twin, which then carries the same
                      corruption: only a baseline with no spec worker sees it
"""

from __future__ import annotations

from dataclasses import replace

import torch

from ..faults import FaultInjector
from ..spec.base import DraftInput, SpecWorkerBase
from ..spec.eagle3 import Eagle3OneModelWorker


class NeighbourHiddenProposer:
    def __init__(self, worker: SpecWorkerBase, faults: FaultInjector) -> None:
        self.worker = worker
        self.faults = faults

    @property
    def capture_layers(self) -> tuple[int, ...]:
        return self.worker.capture_layers

    def forward(self, step: DraftInput) -> list[list[int]]:
        # only speculating requests draft: a plain twin decoded beside its run (paired baseline) is no neighbour
        drafting = [r for r, it in enumerate(step.items) if it.request.speculative]
        if len(drafting) > 1 and self.faults.due("draft_reads_neighbour_hidden", step.step):
            starts = step.meta.query_start.tolist()
            step = replace(step, captured=[_neighbour_rows(c, starts, drafting) for c in step.captured])
        return self.worker.forward(step)


def planted_worker_class(worker_class: type[SpecWorkerBase], faults: FaultInjector | None) -> type[SpecWorkerBase]:
    """The spec worker class to build: an Eagle3 worker whose draft KV goes into the target's last layer when
    draft_kv_into_target is asked for (a method without a draft layer has no such path), else `worker_class`."""
    if faults is None or not faults.wants("draft_kv_into_target") or not issubclass(worker_class, Eagle3OneModelWorker):
        return worker_class
    return type(worker_class.__name__, (_DraftKVIntoTarget, worker_class), {})


class _DraftKVIntoTarget(Eagle3OneModelWorker):
    def draft_kv_index(self) -> int:
        if self.faults.due("draft_kv_into_target", self.step):
            return self.draft_kv_layer - 1
        return self.draft_kv_layer


def _neighbour_rows(hidden: torch.Tensor, starts: list[int], among: list[int] | None = None) -> torch.Tensor:
    """Each request's rows [starts[r], starts[r + 1]) taken from its neighbour's (the next of `among`, default every
    request; the last the first's), row by row from its first (the neighbour's last row repeated where the neighbour
    has fewer). Requests not among them keep their own rows."""
    count = len(starts) - 1
    among = list(range(count)) if among is None else among
    neighbour = {r: among[(i + 1) % len(among)] for i, r in enumerate(among)}
    index: list[int] = []
    for r in range(count):
        n = neighbour.get(r, r)
        first, last = starts[n], starts[n + 1] - 1
        index.extend(min(first + j, last) for j in range(starts[r + 1] - starts[r]))
    return hidden[torch.tensor(index, dtype=torch.int64, device=hidden.device)]
