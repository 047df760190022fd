"""The lossless gate outside float32: each divergence judged by its logit margin against a measured noise floor.

In bf16/fp16 two non-speculative runs already differ once the batch shape changes the reduction order: rounding
moves every log-probability a little, and where the two best tokens were nearly tied the argmax flips. A spec-dec
bug instead emits a token the baseline was confident against. What tells them apart is the margin at the first
divergent token, where both sides share the prefix:

    margin = log p_base(baseline's token) - log p_base(other side's token)      (nats, >= 0 under greedy)

and the other side's own view of it, `reverse = log p_other(its token) - log p_other(baseline's token)` (>= 0
when it chose greedily from its own logits). A side records each output token's log-probability and its top k
alternatives (k = 5: the most OpenAI's completions API returns, so every server can give what our engine keeps);
when the other token is not among them the margin is only bounded below (by the k-th alternative).

The noise floor comes from a control: the plain side decoded again at another batch shape (`control`).
Its divergences from the baseline are numerics by construction, and every position the two share before they
diverge measures the same noise directly: for each token of both top-k lists, how much its gap to the emitted token
moved between the two runs. A numerics flip needs the gap to move by more than the margin, so

    noise bound  y = FACTOR x max(|gap moves| over the control's shared positions, control divergence margins)

THE RULE. float32 is exact (any divergence fails). Otherwise a task FAILs when (1) a divergence's judged margin,
max(margin, -reverse), exceeds y (a lower bound that exceeds it counts), or (2) its divergence rate is above the
control's by a one-sided Fisher exact test at ALPHA, or (3) a calibrated `lossless_tolerance` (a fraction) is
exceeded. A divergence whose baseline margin is negative (beyond rounding) contradicts the baseline's own greedy
choice: it is "inconsistent", never a near-tie, and a task that would otherwise PASS cannot be judged.
FALSE-FAIL RATE: if a clean run's gap moves are exchangeable with the control's N measured ones, a numerics
divergence's margin exceeds the largest of them with probability <= 1 / (N + 1), so (1) falsely fails with
probability <= d / (N + 1) for d divergences (FACTOR > 1 only lowers it, and leaves room for a spec-dec step's
shape change being another than the control's); (2) falsely fails with probability <= ALPHA. Both are stated in
each verdict, and a seeded simulation in the tests measures the rate.

Pure functions on sample records (no torch): a record's `logprobs` is a list, per output token, of [logprob,
[[token, logprob], ...top k], (token)]; the third element, when present, is the token as the server named it (an
endpoint), else the token is the sample's output_token_ids entry.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ...results.paired import first_divergence
from ...results.run_summary import Verdict
from ...results.sample_record import SampleRecord
from .evidence import format_nats, sample_logprobs_problem

CONSISTENCY_SLACK = 1e-3  # nats: stored logprobs are rounded to 5 decimals; below -this a margin contradicts greedy
FACTOR = 2.0  # slack on the measured noise: a spec-dec step changes the shape differently than the control does
ALPHA = 0.01  # the divergence-rate test's one-sided level
MIN_NOISE_SAMPLES = 20  # fewer measured gap moves than this: no noise floor (the gate cannot judge)


def tokens_of(sample: SampleRecord) -> list[Any] | None:
    """The output tokens the sample's logprobs are about, or None when it has no logprobs."""
    records = sample.logprobs
    if not records:
        return None
    ids = sample.output_token_ids or []
    out = []
    for i, rec in enumerate(records):
        if len(rec) > 2:
            out.append(rec[2])
        elif i < len(ids):
            out.append(ids[i])
        else:
            return None  # a record without its token: unusable
    return out


def _logprob_of(record: list, token: Any) -> float | None:
    """token's logprob in one position's record: exact when it is the emitted token or among the alternatives."""
    for t, lp in record[1]:
        if t == token:
            return float(lp)
    return None


def _gap(record: list, token: Any, other: Any) -> tuple[float, bool]:
    """log p(token) - log p(other) at one position where `token` was emitted; (value, exact). Not exact: `other` is
    not among the alternatives, so the gap is at least the one to the last alternative (0 when there are none)."""
    own = float(record[0])
    lp = _logprob_of(record, other)
    if lp is not None:
        return own - lp, True
    floor = min((float(v) for _, v in record[1]), default=own)
    return own - floor, False


def divergence_margin(base: SampleRecord, other: SampleRecord) -> dict[str, Any] | None:
    """The margins at the first token where `other` departs from `base` (None: identical, or no logprobs on a side).
    Numbers and token ids only. `lower_bound`: the margin is only bounded below (the other token is not in the
    baseline's stored top k); `reverse_lower_bound` likewise on the other side."""
    bt, ot = tokens_of(base), tokens_of(other)
    if bt is None or ot is None:
        return None
    p = first_divergence(bt, ot)
    if p is None:
        return None
    rec = {"position": p}
    if p >= len(bt) or p >= len(ot):  # one output ends there: no token to weigh against
        rec.update(margin=None, ended=True)
        return rec
    b, o = bt[p], ot[p]
    margin, exact = _gap(base.logprobs[p], b, o)
    reverse, rexact = _gap(other.logprobs[p], o, b)
    rec.update(
        baseline_token=b,
        other_token=o,
        baseline_logprob=round(float(base.logprobs[p][0]), 5),
        baseline_logprob_other=_round(_logprob_of(base.logprobs[p], o)),
        other_logprob=round(float(other.logprobs[p][0]), 5),
        other_logprob_baseline=_round(_logprob_of(other.logprobs[p], b)),
        margin=round(margin, 5),
        lower_bound=not exact,
        reverse_margin=round(reverse, 5),
        reverse_lower_bound=not rexact,
    )
    rec["judged"] = judged_margin(rec)
    return rec


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 5)


def judged_margin(rec: dict[str, Any]) -> float | None:
    """How strongly the evidence favours the baseline's token: the baseline's margin, or the other side's own logits
    ranking the baseline's token above the one it emitted (a negative exact reverse margin), whichever is larger."""
    if rec.get("margin") is None:
        return None
    judged = rec["margin"]
    if rec.get("reverse_margin") is not None and not rec.get("reverse_lower_bound"):
        judged = max(judged, -rec["reverse_margin"])
    return round(judged, 5)


def gap_moves(base: SampleRecord, other: SampleRecord) -> list[float]:
    """The noise measured on one pair of plain runs: at every position both share (before any divergence) and for
    every alternative both stored, |gap in base - gap in other| of the emitted token to that alternative."""
    bt, ot = tokens_of(base), tokens_of(other)
    if bt is None or ot is None:
        return []
    p = first_divergence(bt, ot)
    end = min(len(bt), len(ot)) if p is None else p
    moves = []
    for i in range(end):
        rb, ro = base.logprobs[i], other.logprobs[i]
        theirs = {t: float(lp) for t, lp in ro[1]}
        for t, lp in rb[1]:
            if t != bt[i] and t in theirs:
                moves.append(abs((float(rb[0]) - float(lp)) - (float(ro[0]) - theirs[t])))
    return moves


def pair_by_doc(
    a: Iterable[SampleRecord], b: Iterable[SampleRecord], task: str
) -> list[tuple[SampleRecord, SampleRecord]]:
    """The samples of `task` in both, paired by document and repeat."""
    other = {(s.doc_id, s.repeat): s for s in b if s.task == task}
    return [(s, other[(s.doc_id, s.repeat)]) for s in a if s.task == task and (s.doc_id, s.repeat) in other]


def noise_floor(
    base_samples: list[SampleRecord], control_samples: list[SampleRecord], task: str
) -> dict[str, Any] | None:
    """What the control measured for one task: its divergences from the baseline (with margins), how many gap moves,
    their largest, and the noise bound y. None when the control holds no logprobs for this task."""
    pairs = pair_by_doc(base_samples, control_samples, task)
    moves: list[float] = []
    margins = []
    divergent = 0
    for b, c in pairs:
        if tokens_of(b) is None or tokens_of(c) is None or sample_logprobs_problem(b) or sample_logprobs_problem(c):
            continue  # no usable numbers: a NaN would make the bound NaN, and every comparison with it false
        moves.extend(gap_moves(b, c))
        if first_divergence(b.output_token_ids, c.output_token_ids) is not None:
            divergent += 1
            m = divergence_margin(b, c)
            if m is not None and m.get("margin") is not None:
                margins.append({"doc_id": b.doc_id, **m})
    if len(moves) < MIN_NOISE_SAMPLES:
        return None
    # A control divergence's margin is a gap that moved at least that much: part of the measured noise too.
    largest = max(moves + [m["margin"] for m in margins if not m["lower_bound"]])
    return {
        "num_pairs": len(pairs),
        "divergent": divergent,
        "divergences": margins,
        "num_noise_samples": len(moves),
        "max_gap_move": round(max(moves), 5),
        "largest_noise": round(largest, 5),
        "factor": FACTOR,
        "bound": round(FACTOR * largest, 5),
    }


@dataclass(frozen=True)
class NoFloor:
    """Why a task has no noise floor, and whether recording a control could give it one."""

    reason: str
    control_helps: bool = True


def floor_missing(base_samples: list[SampleRecord], control_samples: list[SampleRecord] | None, task: str) -> NoFloor:
    """Why there is no noise floor for `task`: no control, the pairs dropped because a side's logprobs are not
    usable numbers (a NaN from the baseline: recording another control cannot help), or too few gap moves."""
    if control_samples is None:
        return NoFloor("no control run with logprobs")
    pairs = pair_by_doc(base_samples, control_samples, task)
    dropped = [
        (side, s.doc_id, problem)
        for b, c in pairs
        for side, s in (("baseline", b), ("control", c))
        if (problem := _unusable_logprobs(s))
    ]
    if dropped:
        side, doc, problem = dropped[0]
        docs = len({d for _, d, _ in dropped})
        return NoFloor(
            f"the control measured no noise floor: {docs} of {len(pairs)} document pairs dropped because "
            f"their logprobs are not usable numbers (first: {side} doc {doc}: {problem}); another control "
            "cannot measure noise from them",
            control_helps=False,
        )
    return NoFloor(f"the control measured fewer than {MIN_NOISE_SAMPLES} gap moves ({len(pairs)} document pairs)")


def _unusable_logprobs(sample: SampleRecord) -> str | None:
    """Why a sample's logprobs are no evidence: what its records hold (NaN, +-inf, ...), or why the client refused
    the ones its server sent (then none were kept, which must not read as "too few gap moves")."""
    if sample.logprobs_problem:
        return f"refused when read: {sample.logprobs_problem}"
    return sample_logprobs_problem(sample) if tokens_of(sample) is not None else None


def fisher_greater(d: int, n: int, m: int, n_control: int) -> float:
    """One-sided Fisher exact p-value that d of n is a higher rate than m of n_control: P(X >= d) for X
    hypergeometric (n draws from n + n_control holding d + m divergent)."""
    total, hits = n + n_control, d + m
    denom = math.comb(total, n)
    upper = min(n, hits)
    return min(1.0, sum(math.comb(hits, x) * math.comb(total - hits, n - x) for x in range(d, upper + 1)) / denom)


def margin_verdict(
    divergences: list[dict[str, Any]],
    n: int,
    floor: dict[str, Any] | None,
    tolerance: float | None,
    control_run: str | None = None,
    no_floor: NoFloor | None = None,
) -> tuple[str, str, dict[str, Any]]:
    """(verdict, reason, record) for a non-exact dtype. `divergences`: the spec run's first divergences, each with
    its margins (divergence_margin) or none. floor: noise_floor() of the control, None when there is none (then
    `no_floor` says why: `floor_missing`). tolerance: a calibrated lossless_tolerance (the largest divergent fraction
    accepted), None when uncalibrated."""
    d = len(divergences)
    record: dict[str, Any] = {"rule": RULE, "alpha": ALPHA, "factor": FACTOR}
    if tolerance is not None and d / n > tolerance:
        return Verdict.FAIL, f"{d} of {n} differ ({d / n:.4f} > tolerance {tolerance:.4f})", record
    judged = [x for x in divergences if x.get("judged") is not None]
    if floor is None or len(judged) < d:
        no_floor = no_floor or NoFloor("no control run with logprobs")
        missing = no_floor.reason if floor is None else unjudged(divergences)
        if tolerance is not None:
            return (
                Verdict.PASS,
                f"{d} of {n} differ ({d / n:.4f} <= tolerance {tolerance:.4f}; margins not judged: {missing})",
                record,
            )
        advice = "" if floor is None and not no_floor.control_helps else f"; {WHAT_TO_DO}"
        return Verdict.UNCALIBRATED, f"{d} of {n} differ and the margins cannot be judged ({missing}){advice}", record
    y = floor["bound"]
    # Under greedy decoding the baseline's token is its own argmax, so its margin is >= 0 (ties: 0). A negative one
    # means its logprobs do not describe the choice it made (misaligned logprobs, or it did not decode greedily):
    # that divergence cannot be judged, and is never counted as a near-tie.
    inconsistent = [x for x in judged if x.get("margin", 0.0) < -CONSISTENCY_SLACK]
    judged = [x for x in judged if x.get("margin", 0.0) >= -CONSISTENCY_SLACK]
    for x in inconsistent:
        x["class"] = "inconsistent"
    beyond = [x for x in judged if x["judged"] > y]
    for x in judged:  # "near-tie?": within the bound, but only a lower bound of the margin is known
        x["class"] = "beyond-noise" if x["judged"] > y else ("near-tie" if not x.get("lower_bound") else "near-tie?")
    p = fisher_greater(d, n, floor["divergent"], floor["num_pairs"])
    false_fail = min(1.0, ALPHA + d / (floor["num_noise_samples"] + 1))
    record.update(
        noise_bound=y,
        control_run=control_run,
        control_divergent=floor["divergent"],
        control_pairs=floor["num_pairs"],
        rate_p=round(p, 6),
        false_fail_bound=round(false_fail, 6),
        num_noise_samples=floor["num_noise_samples"],
        largest_margin=max((x["judged"] for x in judged), default=None),
    )
    measured = (
        f"the noise bound {format_nats(y)} measured on the control ({floor['divergent']} of "
        f"{floor['num_pairs']} diverge)"
    )
    if beyond:
        worst = max(beyond, key=lambda x: x["judged"])
        docs = ", ".join(f"doc {x['doc_id']} at token {x['position']} ({format_nats(x['judged'])})" for x in beyond[:5])
        why = (
            f"{len(beyond)} of {d} divergences are beyond {measured}: largest margin {format_nats(worst['judged'])} "
            "nats; "
            f"{docs}{_no_noise_note(floor)}"
        )
        return Verdict.FAIL, why, record
    if p < ALPHA:
        return (
            Verdict.FAIL,
            (
                f"{d} of {n} diverge, significantly more than the control's {floor['divergent']} of "
                f"{floor['num_pairs']} (one-sided Fisher p = {p:.2g} < {ALPHA})"
            ),
            record,
        )
    if inconsistent:
        docs = ", ".join(
            f"doc {x['doc_id']} at token {x['position']} ({format_nats(-x['margin'])} nats)" for x in inconsistent[:5]
        )
        why = (
            f"{len(inconsistent)} of {d} divergences cannot be judged: the baseline emitted a token its own "
            f"logprobs rank below the other side's ({docs}), so its logprobs do not describe its greedy choice "
            f"(misaligned, or not greedy); the rest are within {measured}"
        )
        return Verdict.UNCALIBRATED, why, record
    unsure = sum(x["class"] == "near-tie?" for x in judged)
    largest = max(x["judged"] for x in judged)
    note = f", {unsure} of them only bounded below" if unsure else ""
    why = (
        f"{d} of {n} diverge, all at near-ties (largest margin {format_nats(largest)} within {measured}{note}; "
        f"divergence rate p = {p:.2g}; false-FAIL rate <= {false_fail:.3f})"
    )
    return Verdict.PASS, why, record


def unjudged(divergences: list[dict[str, Any]]) -> str:
    """Why some divergences cannot be judged, in words: each one's problem (`evidence`), else no logprobs."""
    lacking = [x for x in divergences if x.get("judged") is None]
    problems = [f"doc {x['doc_id']}: {x['problem']}" for x in lacking if x.get("problem")]
    plain = len(lacking) - len(problems)
    parts = ([f"{plain} divergences lack logprobs"] if plain else []) + problems[:3]
    more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
    return "; ".join(parts) + more


def _no_noise_note(floor: dict[str, Any]) -> str:
    """When the control measured no noise at all, a FAIL rests on the plain side being deterministic: say so, and
    what that leaves open (the spec path's own verify-width numerics, which no plain control can measure)."""
    if floor["largest_noise"] > 0:
        return ""
    return (
        f" (the control measured no noise at all: {floor['num_noise_samples']} gap moves, all 0, so this "
        "engine's plain decoding does not depend on the batch shape; any divergence is then the spec-dec path's "
        "own doing, a bug or logits that depend on how many tokens a step verifies (what the "
        "verify_width_numerics bug class plants))"
    )


RULE = (
    f"FAIL if a divergence's margin exceeds {FACTOR:g} x the largest noise the control measured, or its "
    f"divergence rate is above the control's (one-sided Fisher exact, alpha {ALPHA:g})"
)
WHAT_TO_DO = (
    "record a control with `specdec-eval run ... --control` (runs with logprobs: this version), or "
    "store a calibrated lossless_tolerance in the reference entry"
)
