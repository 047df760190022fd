"""Whether a run's per-token log-probability records can be evidence (GenerationOutput.logprobs: per output token
[logprob, [[key, logprob], ...alternatives], key?], the third element an endpoint's token key).

The lossless gate judges a divergence by differences of these numbers: a NaN margin would be neither a near-tie
nor beyond the noise bound, and +-inf makes it infinite, so such records are not evidence. The endpoint client
refuses them as it parses an answer; a gate asks the same of records it reads back (`records_problem`).

What a usable record is: a finite log-probability <= 0 (rounding allowed: LOGPROB_SLACK) for the emitted token;
alternatives that are [integer key, finite log-probability <= 0] pairs; where the emitted token is itself among
its alternatives, the same number in both places. Pure functions on plain lists (no torch)."""

from __future__ import annotations

import math
from typing import Any

# Stored logprobs are rounded to 5 decimals and a server's float32 softmax can overshoot 0 by a few ulps; a
# log-probability above this is no probability at all.
LOGPROB_SLACK = 1e-3


def _number(value: Any) -> float | None:
    """A real number (not a bool), as float; None otherwise."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _is_key(value: Any) -> bool:
    """A token key: an integer (a token id, or an endpoint's negative text hash), never a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def logprob_problem(value: Any) -> str | None:
    """Why `value` is not a log-probability, in a few words; None when it is one."""
    x = _number(value)
    if x is None:
        return f"a {type(value).__name__}, not a number"
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "+inf" if x > 0 else "-inf (probability 0)"
    if x > LOGPROB_SLACK:
        return f"{x:g} > 0 (a probability above 1)"
    return None


def record_problem(record: Any) -> str | None:
    """Why one position's record cannot be evidence; None when it can."""
    if not isinstance(record, list | tuple) or len(record) not in (2, 3):
        return "not a [logprob, alternatives(, token)] record"
    logprob, alternatives = record[0], record[1]
    if (why := logprob_problem(logprob)) is not None:
        return f"the emitted token's logprob is {why}"
    if len(record) == 3 and not _is_key(record[2]):
        return "its token is not an integer key"
    if not isinstance(alternatives, list | tuple):
        return "its alternatives are not a list"
    for alt in alternatives:
        if not isinstance(alt, list | tuple) or len(alt) != 2 or not _is_key(alt[0]):
            return "an alternative is not a [token, logprob] pair"
        if (why := logprob_problem(alt[1])) is not None:
            return f"an alternative's logprob is {why}"
        if len(record) == 3 and alt[0] == record[2] and abs(float(alt[1]) - float(logprob)) > LOGPROB_SLACK:
            return f"the emitted token is listed at {float(alt[1]):g} among its alternatives but at {float(logprob):g}"
    return None


def records_problem(records: Any, num_tokens: int | None = None) -> str | None:
    """Why a sample's records cannot be evidence, naming the first bad position; None when every record can (or
    there are none: no records is the gate's "no logprobs", said there). `num_tokens`: the length of the output
    they describe; more records than tokens describe another output."""
    if records is None:
        return None
    if not isinstance(records, list | tuple):
        return "the logprobs are not a list of records"
    if num_tokens is not None and len(records) > num_tokens:
        return f"{len(records)} logprob records for {num_tokens} output tokens"
    for i, record in enumerate(records):
        if (why := record_problem(record)) is not None:
            return f"token {i}: {why}"
    return None
