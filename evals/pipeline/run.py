"""The run pipeline (docs/architecture.md, "Seams"): `run(plan, backend)`, the one path of every run on every backend.

One policy, written once, on what the backend says it can do (`Abilities`):

1. preflight: every check a run can fail on its input, `--baseline RUN` included, before anything starts;
2. the noise-floor control, when wanted (outside float32 for a spec-dec run, or
   `--control`) and the backend can decode it: found recorded, else decoded once and reused by later runs;
3. the lossless baseline of a spec-dec run. Sampled tasks of a run whose sampler does not reproduce a plain run's
   tokens (`--spec-sampling rejection`, a server) are judged in distribution: the backend's plain engine scores
   their outputs after the run, nothing is decoded for them, and a run of only such
   tasks needs neither a decoded baseline nor a control. Sampled tasks of our coupled sampler, which does reproduce
   them, keep their decoded baseline and are scored as well (judged both ways). Otherwise, in this order: the run
   `--baseline RUN` names; a plain run of this configuration recorded earlier (where the backend's runs can be found
   again); nothing to decode it on (a server without `--baseline-endpoint`: the gate looks one up); the plain twins
   decoded beside the run from one prefill and audited (`--baseline paired`, where the backend pairs, and no task is
   scored); else a separate plain run first;
4. the run itself (evaluate, record, gate: `one_run`, or `paired_run` with its twins).

Commands parse options, call `run`, print; `selftest --mutants` and `bench --verdict` call it too.
"""

from __future__ import annotations

import sys
from dataclasses import replace

from ...results.run_summary import RunSummary
from ..lossless.baseline import BaselineKind, BaselineRef
from ..lossless.control import wants_control
from ..lossless.scoring import sampled_task_names, scored_task_names, spec_sampling
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
    scored = scored_tasks(plan, backend)
    if scored and len(scored) == len(plan.options.tasks):  # judged in distribution only: nothing to decode
        print(
            "lossless gate: sampled tasks judged in distribution; the plain engine scores the run's outputs "
            "after it (teacher forcing)",
            file=sys.stderr,
        )
        return backend.evaluate(
            RUN, plan, BaselineRef(None, BaselineKind.SCORED, scorer=backend.scorer()), progress_for
        )
    control = decode_control(plan, backend, progress_for)
    if not backend.abilities.speculative:
        return backend.evaluate(RUN, plan, NO_BASELINE, progress_for)
    baseline = choose_baseline(plan, backend, control, progress_for, paired_ok=not scored)
    coupled = coupled_sampled_tasks(plan, backend)
    if baseline.kind == BaselineKind.TWIN:
        return backend.evaluate_paired(plan, control, progress_for, score_sampled=bool(coupled))
    scorer = backend.scorer() if scored or coupled else None
    return backend.evaluate(RUN, plan, replace(baseline, scorer=scorer), progress_for)


def scored_tasks(plan: RunPlan, backend: Backend) -> list[str]:
    """The tasks judged in distribution: sampled ones (temperature > 0), when the engine under test's sampler does
    not reproduce the plain run's tokens."""
    if not backend.abilities.speculative:
        return []
    return scored_task_names(plan.options, backend.declared_identity())


def coupled_sampled_tasks(plan: RunPlan, backend: Backend) -> list[str]:
    """The sampled tasks (temperature > 0) of a spec-dec run on our coupled sampler: judged token for token and in
    distribution (the gate's IDENTITY_AND_DISTRIBUTION judge): their outputs are scored too where it can."""
    if not backend.abilities.speculative or not backend.abilities.scores:
        return []
    if spec_sampling(backend.declared_identity()) != "coupled":
        return []
    return sampled_task_names(plan.options)


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
    # a server's control is looked up once it answers (evaluate_side), which says whether it decodes it
    return backend.evaluate(side, plan, NO_BASELINE, progress_for).run_dir


def choose_baseline(
    plan: RunPlan, backend: Backend, control: str | None, progress_for: ProgressFor | None, paired_ok: bool = True
) -> BaselineRef:
    """What a spec-dec run's lossless gate compares with (a separate plain run is decoded here; paired twins are
    decoded with the run: kind "twin"; not when some tasks are judged in distribution, `paired_ok` False: their
    tokens differ from any twin's, and the other tasks' baseline is then decoded apart)."""
    can = backend.abilities
    if plan.baseline_run is not None:  # checked in preflight, and again when the gate opens it
        return BaselineRef(plan.baseline_run, BaselineKind.RECORDED, checked=True, control=control)
    if can.reuses_baseline:
        identity = backend.identity(BASELINE)
        if identity is not None and find_baseline(plan.out, identity, plan.options) is not None:
            return BaselineRef(None, BaselineKind.RECORDED, control=control)
    if not can.plain_side:
        return BaselineRef(None, BaselineKind.RECORDED, control=control)
    if plan.baseline_mode == "paired" and paired_ok:
        if can.pairs:
            return BaselineRef(None, BaselineKind.TWIN, control=control)
        if can.why_not_paired:
            print(f"lossless gate: {can.why_not_paired}", file=sys.stderr)
    reused = " (reused by later runs)" if can.reuses_baseline else ""
    print(f"lossless gate: decoding the non-speculative baseline first{reused}", file=sys.stderr)
    made = backend.evaluate(BASELINE, plan, NO_BASELINE, progress_for)
    return BaselineRef(made.run_dir, BaselineKind.SEPARATE, control=control)
