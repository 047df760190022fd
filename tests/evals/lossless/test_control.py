"""The noise-floor control's identity (evals/lossless/control.py): the run a control engine records is the one the
lossless gate looks up for a spec-dec run of the same configuration, never a baseline, and made only outside
float32 unless asked for."""

from __future__ import annotations

from dataclasses import replace

from specdec_eval.evals.lossless.control import (
    ControlEngine,
    candidate_shapes,
    control_identity,
    not_reusable,
    wants_control,
)
from specdec_eval.evals.run_identity import baseline_config, baseline_identity, run_key
from specdec_eval.evals.run_types import EvalOptions
from specdec_eval.evals.tasks.registry import parse_tasks
from specdec_eval.workers.engine.engine import identity_of
from specdec_eval.workers.engine_options import from_options
from specdec_eval.workers.interface import EngineIdentity

from ...engine_helpers import FakeEngine


def test_the_control_engine_records_what_the_gate_looks_up():
    options = EvalOptions(tasks=parse_tasks(["gsm8k"]), limit=32, sample="random")
    bug = ("emit_rejected_draft",)
    spec = from_options(model="tiny", dtype="bfloat16", spec="eagle3", max_batch_size=64, inject=bug)
    (shape,) = candidate_shapes(identity_of(spec))
    assert shape == {"max_batch_size": 1}
    plain = replace(baseline_config(spec), max_batch_size=1)
    engine = ControlEngine(FakeEngine(identity=identity_of(plain)), shape)
    wanted = control_identity(identity_of(spec), shape)
    assert run_key(engine.identity, options) == run_key(wanted, options)
    assert run_key(wanted, options) != run_key(baseline_identity(identity_of(spec)), options)  # never a baseline
    assert run_key(wanted, options) != run_key(identity_of(plain), options)  # nor a plain run at batch size 1
    engine.close()  # everything but the identity is the wrapped engine's
    assert engine._engine.closed
    one = from_options(model="tiny", dtype="bfloat16", spec="eagle3", max_batch_size=1)
    assert candidate_shapes(identity_of(one)) == [{"max_batch_size": 2}]


def test_made_outside_float32_unless_asked():
    assert wants_control(None, True, "bfloat16") and wants_control(None, True, "float16")
    assert not wants_control(None, True, "float32") and not wants_control(None, False, "bfloat16")
    assert wants_control(True, True, "float32") and not wants_control(False, True, "bfloat16")


def _served(**config) -> EngineIdentity:
    base = {"endpoint": "http://127.0.0.1:8000", "served_model": "m", "server_version": "0.1", "spec": None}
    return EngineIdentity(
        kind="endpoint",
        model="m",
        spec=None,
        max_draft_len=0,
        kv_cache=None,
        dtype="bfloat16",
        resolved_dtype=None,
        tp_size=1,
        world_size=1,
        config={**base, **config},
    )


def test_a_server_s_control_is_keyed_by_its_command_or_measured_again():
    """Another fake behind the same port, model id, owner and version reused a control recorded for the first: a
    server's noise is its process's. Keyed by the command that started it; unknown (not started here): never reused."""
    options = EvalOptions(tasks=parse_tasks(["gsm8k"]), limit=4)
    shape = {"concurrency": 1}
    started = [_served(server_command=f"specdec-eval serve --model tiny {flags}") for flags in ("", "--inject x")]
    keys = {run_key(control_identity(i, shape), options) for i in started}
    assert len(keys) == 2 and all(not_reusable(i) is None for i in started)
    assert "not started by this run" in not_reusable(_served())
    assert not_reusable(identity_of(from_options(model="tiny", dtype="bfloat16"))) is None  # ours: its config
