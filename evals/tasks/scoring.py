"""Each response of a document scored on its own, by the task's own lm-eval filters and metric.

lm-eval scores a document's `repeats` responses as one list, and `take_first` (the last step of every GSM8K and GPQA
filter) then drops all but the first. Several samples per document are scored here
instead: every response goes through each filter pipeline as if it were the document's only one, then through the
task's `process_results` (exact_match with the task's options), so each sample has its own correctness per filter,
exactly as a run with one sample per document would have given it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

METRIC = "exact_match"  # the metric of every generate_until task here


def score_each(task: Any, doc: dict[str, Any], responses: Sequence[str]) -> list[dict[str, tuple[str, bool]]]:
    """Per response: filter name -> (extracted, correct), with lm-eval's own filters and metric for `task` (a loaded
    lm-eval Task)."""
    out: list[dict[str, tuple[str, bool]]] = [{} for _ in responses]
    for ensemble in task._filters:
        resps: Any = [[r] for r in responses]  # each response as the one answer of its own request
        for make in ensemble.filters:
            resps = make().apply(resps, [doc] * len(responses))
        for i, filtered in enumerate(list(resps)):
            metrics = task.process_results(doc, [filtered])
            value = metrics[METRIC] if METRIC in metrics else next(iter(metrics.values()))
            out[i][ensemble.name] = (str(filtered), bool(value))
    return out
