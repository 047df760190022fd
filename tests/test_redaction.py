"""Redaction of what a run records: secrets inside one argument that holds a whole command, HTTP credentials in a
log line, and a bound on the time any line takes (a server may print one line of many megabytes)."""

from __future__ import annotations

import time

import pytest

from specdec_eval import redaction
from specdec_eval.redaction import MAX_LINE_CHARS, redact_argv, redact_text


def test_option_values_inside_a_recorded_command_are_scrubbed():
    command = (
        'HF_TOKEN=t-1 vllm serve m --api-key sk-2 --token t-3 --api-key=sk-4 --api-key "sk 5" '
        '-H "Authorization: Bearer sk-6" --port 8000'
    )
    (recorded,) = redact_argv([command])
    for secret in ("t-1", "sk-2", "t-3", "sk-4", "sk 5", "sk-6"):
        assert secret not in recorded
    assert recorded.startswith("HF_TOKEN=*** vllm serve m --api-key *** --token *** --api-key=***")
    assert recorded.endswith("--port 8000")  # the rest still says what ran
    assert redact_argv(["run", "--serve-cmd", command])[2] == recorded


def test_http_credentials_in_a_log_line_are_scrubbed():
    line = 'sent Authorization: Bearer sk-live-7 to x; proxy-authorization="Basic Zm9v"; bearer tok-8 ok'
    assert redact_text(line) == 'sent Authorization: Bearer *** to x; proxy-authorization="Basic ***"; bearer *** ok'


def test_a_long_line_is_cut_without_showing_half_a_secret():
    line = "x " * (MAX_LINE_CHARS // 2 - 3) + "--api-key sk-123456789"
    shown = redact_text(line)
    assert len(shown) < MAX_LINE_CHARS + 64 and "characters cut]" in shown
    assert "sk-" not in shown
    assert redact_text("k-9 " + "a" * 2 * MAX_LINE_CHARS + " k-9", ("k-9",)).startswith("*** [")


@pytest.mark.parametrize("unit", ["a", "-", "a_", "x://", "--token ", "Bearer ", "https://a:b", '--api-key "'])
def test_every_pattern_is_linear_and_a_10mb_line_is_quick(unit, monkeypatch):
    """The cut alone would hide a quadratic pattern: first each pattern on a 100k-character line with no cut (a
    quadratic one takes a minute there), then a 10 MB line as a log would hold it."""
    monkeypatch.setattr(redaction, "MAX_LINE_CHARS", 10**9)
    start = time.perf_counter()
    redaction.redact_text(unit * (100_000 // len(unit)))
    assert time.perf_counter() - start < 1.0
    monkeypatch.undo()
    start = time.perf_counter()
    redact_text(unit * (10_000_000 // len(unit)))
    assert time.perf_counter() - start < 0.5
