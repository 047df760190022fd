"""What a lossless verdict may rest on (`judge_divergence`, `format_nats`): a gate reads NO-GATE, never PASS, when
its evidence is missing, non-finite or impossible, and says which.

- A sample's logprob records must be usable (`logprob_records`): a NaN margin is neither a near-tie nor beyond
  the bound; +-inf would print as "(inf nats)".
- A baseline margin that is only a lower bound because the baseline returned no alternatives at all is no evidence
  of a near-tie: that bound is 0 by construction. The divergence is then judged by the other side's exact view of
  the flip (`reverse`: how far its own logits put the baseline's token below its own), which a numerics flip keeps
  within the noise as well (at a flip the control measures the gap move margin + reverse, both >= 0 under greedy
  decoding, so each is at most the move); with neither, it cannot be judged.
- A pair in which a side's request failed is a failure, not a divergence.
- Numbers in reasons: significant digits, so a bound of 2e-05 does not print as 0.0000.

Pure functions on the records a run stores (`SampleRecord`; no torch)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ...results.sample_record import SampleRecord
from ...workers.logprob_records import record_problem, records_problem


def sample_logprobs_problem(sample: SampleRecord) -> str | None:
    """Why a sample's logprobs cannot be evidence, or None when they can (or it has none: the gate's "no logprobs")."""
    return records_problem(sample.logprobs, len(sample.output_token_ids or []))


def request_failed(sample: SampleRecord) -> bool:
    """The sample holds no answer: its request failed (a recorded failure, never an output to compare)."""
    return sample.failed or bool(sample.error)


def comparable_pairs(
    pairs: Iterable[tuple[SampleRecord, SampleRecord]],
) -> tuple[list[tuple[SampleRecord, SampleRecord]], list[Any]]:
    """(pairs whose both requests answered, doc ids of the others): the lossless gate counts divergences among the
    first and reports the second as failed requests ("k requests failed: not compared"), never as divergences."""
    kept, failed = [], []
    for a, b in pairs:
        if request_failed(a) or request_failed(b):
            failed.append(a.doc_id)
        else:
            kept.append((a, b))
    return kept, failed


@dataclass(frozen=True)
class Judged:
    """How a divergence may be judged: `margin` (nats) to compare with the noise bound, or `problem` saying why there
    is no evidence to judge it with (then the task's lossless verdict cannot be PASS)."""

    margin: float | None
    problem: str | None = None
    from_reverse: bool = False  # judged on the other side's exact view because the baseline's told nothing


def judge_divergence(rec: Mapping[str, Any], base_record: Any, other_record: Any) -> Judged:
    """`rec`: the gate's record of one first divergence (margins.divergence_margin: margin, lower_bound,
    reverse_margin, reverse_lower_bound, judged); `base_record` / `other_record`: the two sides' logprob records at
    its position (None where a side has none)."""
    where = f"token {rec.get('position')}"
    for side, record in (("baseline", base_record), ("other side", other_record)):
        if record is not None and (why := record_problem(record)) is not None:
            return Judged(None, f"the {side}'s logprobs at {where}: {why}")
    numbers = [rec.get(k) for k in ("margin", "reverse_margin", "judged") if rec.get(k) is not None]
    if any(not isinstance(x, int | float) or not math.isfinite(x) for x in numbers):
        return Judged(None, f"a margin at {where} is not a finite number")
    if rec.get("margin") is None:
        return Judged(None, f"no margin at {where} (an output ended there, or a side has no logprobs)")
    reverse = rec.get("reverse_margin")
    reverse_exact = reverse is not None and not rec.get("reverse_lower_bound")
    # no alternative but its own token (or none at all): the lower bound is 0 by construction
    named = [t for t, _ in base_record[1]] if base_record is not None else []
    told_nothing = (
        bool(rec.get("lower_bound")) and base_record is not None and set(named) <= {rec.get("baseline_token")}
    )
    if told_nothing:  # the baseline's bound is 0 by construction: the flip's size is only on the other side
        if reverse_exact:
            return Judged(round(abs(float(reverse)), 5), from_reverse=True)
        return Judged(
            None,
            f"the baseline returned no alternatives at {where}, and the other side does not rank "
            "the baseline's token: no margin to judge",
        )
    judged = rec.get("judged", rec["margin"])
    return Judged(round(float(judged), 5))


def format_nats(x: float | None) -> str:
    """A margin or bound in a reason: 4 significant digits (2e-05 stays 2e-05, never 0.0000); "unknown" for None or a
    number that is not finite (which no verdict may rest on)."""
    if x is None or not isinstance(x, int | float) or not math.isfinite(x):
        return "unknown"
    return f"{x:.4g}"
