"""Which per-token log-probability records can be evidence (workers/logprob_records.py): a lossless gate compares
differences of these numbers, so a NaN, an infinity, a positive log-probability or a record that contradicts itself
must be refused before any comparison."""

from __future__ import annotations

import math

import pytest
from specdec_eval.workers.logprob_records import logprob_problem, record_problem, records_problem

GOOD = [-0.1, [[5, -0.1], [7, -2.5]], 5]


def test_a_well_formed_record_is_evidence():
    assert record_problem(GOOD) is None
    assert record_problem([-0.1, [[7, -2.5]]]) is None  # our engine's records carry no token key
    assert record_problem([0.0004, [], 3]) is None  # rounding above 0 within the slack
    assert records_problem([GOOD, GOOD], num_tokens=2) is None
    assert records_problem(None) is None  # no records: the gate's "no logprobs", not a problem here


@pytest.mark.parametrize(
    "value, words",
    [
        (math.nan, "NaN"),
        (math.inf, "+inf"),
        (-math.inf, "-inf"),
        (0.5, "above 1"),
        ("-1", "not a number"),
        (None, "not a number"),
        (True, "not a number"),
    ],
)
def test_what_is_not_a_log_probability(value, words):
    assert words in logprob_problem(value)
    assert words in record_problem([value, [], 5])  # as the emitted token's
    assert "an alternative's logprob" in record_problem([-0.1, [[5, -0.1], [7, value]], 5])


@pytest.mark.parametrize(
    "record, words",
    [
        ([-0.1], "not a [logprob"),
        ("x", "not a [logprob"),
        ([-0.1, "alts", 5], "alternatives are not a list"),
        ([-0.1, [[5]], 5], "not a [token, logprob] pair"),
        ([-0.1, [["a", -1.0]], 5], "not a [token, logprob] pair"),
        ([-0.1, [], 5.0], "not an integer key"),
        ([-0.1, [[5, -3.0]], 5], "listed at -3 among its alternatives but at -0.1"),
    ],
)
def test_records_that_contradict_their_shape_or_themselves(record, words):
    assert words in record_problem(record)


def test_the_first_bad_position_is_named_and_extra_records_refused():
    assert records_problem([GOOD, [math.nan, [], 5]]) == "token 1: the emitted token's logprob is NaN"
    assert records_problem([GOOD, GOOD, GOOD], num_tokens=2) == "3 logprob records for 2 output tokens"
    assert "not a list of records" in records_problem({"a": 1})
