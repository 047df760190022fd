"""The proposer-side planted bugs, each an Eagle3 worker subclass chosen at engine build:
draft_reads_neighbour_hidden  when two or more speculating requests share a step, each request's drafts start from
                      its neighbour's hidden state (the speculating requests rolled by one: request r reads the next
                      one's, the last the first's; a plain twin decoded beside its run is no neighbour). At batch 1
                      it is exactly the clean engine. The target still verifies every draft, so greedy outputs stay
                      lossless; only acceptance falls, and only at batch > 1 (a draft indexing bug a single-request
                      check never sees)
draft_kv_into_target  the Eagle3 draft layer writes (and reads) its KV in the target's last KV layer instead of its
                      own. The prompt's KV blocks are shared with the paired twin, which then carries the same
                      corruption: only a baseline with no spec worker sees it
"""

from __future__ import annotations

import torch

from ..faults import FaultInjector
from ..spec.base import SpecWorkerBase
from ..spec.eagle3 import Eagle3OneModelWorker


def planted_worker_class(worker_class: type[SpecWorkerBase], faults: FaultInjector | None) -> type[SpecWorkerBase]:
    """The spec worker class to build: the Eagle3 worker with each asked-for proposer bug mixed in (a method
    without a draft layer has no such path), else `worker_class`."""
    if faults is None or not issubclass(worker_class, Eagle3OneModelWorker):
        return worker_class
    bugs = [bug for point, bug in _BUGS.items() if faults.wants(point)]
    if not bugs:
        return worker_class
    return type(worker_class.__name__, (*bugs, worker_class), {})


class _DraftKVIntoTarget(Eagle3OneModelWorker):
    def draft_kv_index(self) -> int:
        if self.faults.due("draft_kv_into_target", self.step):
            return self.draft_kv_layer - 1
        return self.draft_kv_layer


class _NeighbourHidden(Eagle3OneModelWorker):
    def draft_start_hidden(self, hidden: torch.Tensor, items) -> torch.Tensor:
        drafting = [r for r, it in enumerate(items) if it.request.speculative]
        if len(drafting) < 2 or not self.faults.due("draft_reads_neighbour_hidden", self.step):
            return hidden
        return hidden[torch.tensor(rolled_among(len(items), drafting), device=hidden.device)]


def rolled_among(count: int, among: list[int]) -> list[int]:
    """Row r's source for `count` rows: the next of `among` for each of them (the last the first's), itself else."""
    neighbour = {r: among[(i + 1) % len(among)] for i, r in enumerate(among)}
    return [neighbour.get(r, r) for r in range(count)]


_BUGS = {"draft_kv_into_target": _DraftKVIntoTarget, "draft_reads_neighbour_hidden": _NeighbourHidden}
