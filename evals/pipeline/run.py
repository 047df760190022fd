"""The run pipeline (DESIGN.md, "Seams"): `run(plan, backend)`, the one path of every run on every backend.

One policy, written once, on what the backend says it can do (backends.py `Abilities`):

1. preflight: every check a run can fail on its input, `--baseline RUN` included, before anything starts;
2. the noise-floor control (evals/lossless/control.py), when wanted (outside float32 for a spec-dec run, or
   `--control`) and the backend can decode it: found recorded, else decoded once and reused by later runs;
3. the lossless baseline of a spec-dec run, in this order: the run `--baseline RUN` names; a plain run of this
   configuration recorded earlier (where the backend's runs can be found again); nothing to decode it on (a server
   without `--baseline-endpoint`: the gate looks one up); the plain twins decoded beside the run from one prefill and
   audited (`--baseline paired`, where the backend pairs); else a separate plain run first;
4. the run itself (evaluate, record, gate: one_run.py, or paired_run.py with its twins).

Commands parse options, call `run`, print (cli/run.py); `selftest --mutants` and `bench --verdict` call it too.
"""

from __future__ import annotations

import sys

from ...results.run_summary import RunSummary
from ..lossless.baseline import BaselineRef
from ..lossless.control import wants_control
from ..run_identity import find_baseline
from ..run_types import RunPlan
from .backends import Backend
from .one_run import NO_BASELINE, ProgressFor
from .preflight import preflight
from .run_sides import BASELINE, RUN, control_side


def run(plan: RunPlan, backend: Backend, progress_for: ProgressFor | None = None) -> RunSummary | None:
    """Evaluate, record and gate `plan` on the backend's engines, with the control and the baseline its lossless gate
    needs; returns the run's summary (None for a dry run, which starts nothing). progress_for(): a context manager
    giving a progress callback, one per evaluation."""
    preflight(plan, backend)
    if backend.dry_run:
        backend.show(plan)
        return None
    control = decode_control(plan, backend, progress_for)
    if not backend.abilities.speculative:
        return backend.evaluate(RUN, plan, NO_BASELINE, progress_for)
    baseline = choose_baseline(plan, backend, control, progress_for)
    if baseline.kind == "twin":
        return backend.evaluate_paired(plan, control, progress_for)
    return backend.evaluate(RUN, plan, baseline, progress_for)


def decode_control(plan: RunPlan, backend: Backend, progress_for: ProgressFor | None) -> str | None:
    """The control's run folder: found recorded or decoded now; None when not wanted or not possible."""
    can = backend.abilities
    if can.control_shape is None or not wants_control(plan.control, can.speculative, can.dtype):
        return None
    side = control_side(can.control_shape)
    identity = backend.identity(side)
    found = find_baseline(plan.out, identity, plan.options) if identity is not None else None
    if found is not None:
        return str(found.path)
    print(f"lossless gate: decoding {side.describe()}; reused by later runs", file=sys.stderr)
    return backend.evaluate(side, plan, NO_BASELINE, progress_for).run_dir


def choose_baseline(plan: RunPlan, backend: Backend, control: str | None, progress_for: ProgressFor | None
                    ) -> BaselineRef:  # fmt: skip
    """What a spec-dec run's lossless gate compares with (a separate plain run is decoded here; paired twins are
    decoded with the run: kind "twin")."""
    can = backend.abilities
    if plan.baseline_run is not None:  # checked in preflight, and again when the gate opens it
        return BaselineRef(plan.baseline_run, "recorded", checked=True, control=control)
    if can.reuses_baseline:
        identity = backend.identity(BASELINE)
        if identity is not None and find_baseline(plan.out, identity, plan.options) is not None:
            return BaselineRef(None, "recorded", control=control)
    if not can.plain_side:
        return BaselineRef(None, "recorded", control=control)
    if plan.baseline_mode == "paired":
        if can.pairs:
            return BaselineRef(None, "twin", control=control)
        if can.why_not_paired:
            print(f"lossless gate: {can.why_not_paired}", file=sys.stderr)
    reused = " (reused by later runs)" if can.reuses_baseline else ""
    print(f"lossless gate: decoding the non-speculative baseline first{reused}", file=sys.stderr)
    made = backend.evaluate(BASELINE, plan, NO_BASELINE, progress_for)
    return BaselineRef(made.run_dir, "separate", control=control)
