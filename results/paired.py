"""Sample-by-sample pairing of two runs: the exact McNemar test and where two generations part ways.

Two runs of the same evaluation see the same documents, so their per-sample correctness is paired data. Only the
discordant pairs carry information about a difference: b (A right, B wrong) and c (A wrong, B right). Under
"no difference" each discordant pair is a fair coin, so min(b, c) is compared with Bin(b + c, 1/2).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

# Up to this many discordant pairs the tail is summed exactly in integers; above it, in log space.
_EXACT_MAX_N = 1000
# Terms of the log-space tail smaller than this fraction of the largest one no longer change a float.
_NEGLIGIBLE = math.log(1e-20)


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value: min(1, 2 * P[X <= min(b, c)]) with X ~ Bin(b + c, 1/2); 1.0 if b + c == 0.

    b: pairs that A got right and B wrong; c: pairs that A got wrong and B right.
    """
    if b < 0 or c < 0:
        raise ValueError(f"discordant counts cannot be negative: b={b}, c={c}")
    n, k = b + c, min(b, c)
    if n == 0:
        return 1.0
    if n <= _EXACT_MAX_N:
        tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n  # int / int: correctly rounded
    else:
        tail = math.exp(_log_binomial_tail(n, k) - n * math.log(2.0))
    return min(1.0, 2.0 * tail)


def _log_binomial_tail(n: int, k: int) -> float:
    """log(sum_{i<=k} C(n, i)) for k <= n / 2, where the terms grow with i: start from the largest term (i = k) and
    walk down with the ratio C(n, i-1) / C(n, i) = i / (n - i + 1) until the terms stop mattering."""
    log_top = math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
    total, rel = 1.0, 0.0  # the sum relative to the top term, and log(term / top term)
    for i in range(k, 0, -1):
        rel += math.log(i / (n - i + 1))
        if rel < _NEGLIGIBLE:
            break
        total += math.exp(rel)
    return log_top + math.log(total)


def first_divergence(a_ids: Sequence[int] | None, b_ids: Sequence[int] | None) -> int | None:
    """Index of the first token where two outputs differ; the shorter length if one is a prefix of the other;
    None if they are identical."""
    a, b = list(a_ids or []), list(b_ids or [])
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


class PairedSamples(dict):
    """task -> [(sample of A, sample of B), ...] ordered by doc id, tasks in A's order.

    `unpaired` holds, per task, the doc ids that only one run has: {task: {"only_a": [...], "only_b": [...]}}
    (tasks where every doc paired are left out).
    """

    def __init__(self) -> None:
        super().__init__()
        self.unpaired: dict[str, dict[str, list[Any]]] = {}


def _index(samples: Iterable[dict[str, Any]], which: str) -> dict[tuple[str, Any], dict[str, Any]]:
    out: dict[tuple[str, Any], dict[str, Any]] = {}
    for s in samples:
        key = (s["task"], s["doc_id"])
        if key in out:
            raise ValueError(f"run {which} holds task {key[0]!r} doc {key[1]} twice; its samples are corrupt")
        out[key] = s
    return out


def pair_samples(samples_a: Iterable[dict[str, Any]], samples_b: Iterable[dict[str, Any]]) -> PairedSamples:
    """Join two runs' samples on (task, doc_id).

    Raises ValueError when a pair's prompt_hash differs: the runs prompted the model differently (other few-shot
    examples, chat template, data), so their samples are not comparable. Docs present in only one run are left
    out of the pairs and listed in the result's `unpaired`.
    """
    a, b = _index(samples_a, "A"), _index(samples_b, "B")
    mismatched = [key for key in a if key in b and a[key].get("prompt_hash") != b[key].get("prompt_hash")]
    if mismatched:
        task, doc = mismatched[0]
        ha, hb = (str(x[(task, doc)].get("prompt_hash"))[:12] for x in (a, b))
        raise ValueError(
            f"{len(mismatched)} paired sample(s) have different prompts (first: task {task!r} doc {doc}, "
            f"prompt_hash {ha} vs {hb}); the runs used different prompts and cannot be compared sample by sample"
        )
    pairs = PairedSamples()
    tasks = list(dict.fromkeys([t for t, _ in a] + [t for t, _ in b]))
    for task in tasks:
        docs_a = {d for t, d in a if t == task}
        docs_b = {d for t, d in b if t == task}
        both = sorted(docs_a & docs_b, key=_doc_order)
        if both:
            pairs[task] = [(a[(task, d)], b[(task, d)]) for d in both]
        only_a, only_b = sorted(docs_a - docs_b, key=_doc_order), sorted(docs_b - docs_a, key=_doc_order)
        if only_a or only_b:
            pairs.unpaired[task] = {"only_a": only_a, "only_b": only_b}
    return pairs


def _doc_order(doc_id: Any) -> tuple[int, Any]:
    return (0, doc_id) if isinstance(doc_id, int) else (1, str(doc_id))
