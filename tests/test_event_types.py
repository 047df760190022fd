"""One set of event type names for the engine and the run store (specdec_eval/event_types.py)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from specdec_eval.results import runs_table
from specdec_eval.workers import events

from specdec_eval import event_types

ROOT = Path(__file__).resolve().parent.parent


def test_failing_events_are_defined_once():
    assert events.FAILING_EVENTS is event_types.FAILING_EVENTS
    assert runs_table.FAILING_EVENTS is event_types.FAILING_EVENTS
    assert set(event_types.FAILING_EVENTS) == {
        "spec_state_leak",
        "request_failed",
        "kv_block_leak",
        "kv_leak",
        "engine_dead",
        "server_stalled",
        "server_exited",
        "nccl_timeout",
    }
    assert set(event_types.FAILING_EVENTS) <= set(event_types.EVENT_TYPES)


def test_event_types_is_a_leaf_module():
    tree = ast.parse(Path(event_types.__file__).read_text(encoding="utf-8"))
    assert not [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]


def test_every_emitted_type_is_named():
    emitted = set()
    for path in (ROOT / "workers").rglob("*.py"):
        emitted |= set(re.findall(r"\bemit\(\s*\"([a-z_]+)\"", path.read_text(encoding="utf-8")))
    assert emitted, "no emit(...) calls found: the pattern no longer matches the engine's code"
    assert emitted <= set(event_types.EVENT_TYPES), emitted - set(event_types.EVENT_TYPES)
