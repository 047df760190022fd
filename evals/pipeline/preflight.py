"""Every check a run can fail on what it was given, made before any run folder is created or engine built, for every
backend (`run` calls `preflight` first): contradictions between options, the runs folder, the acceptance references,
the task data, what the backend's engines need (a draft head, a layout), and the run `--baseline RUN` names. So a bad
input ends in one line, with nothing half written and no model loaded."""

from __future__ import annotations

import os
from pathlib import Path

from ...errors import UserError
from ..lossless.baseline import check_named_baseline
from ..run_types import EvalOptions, RunPlan
from .backends import Backend


def preflight(plan: RunPlan, backend: Backend) -> None:
    """UserError naming the first thing that would make this run fail, else nothing."""
    backend.check_target()
    check_out_folder(plan.out)
    speculative = backend.abilities.speculative
    check_acceptance_options(plan, speculative, bool(backend.target.engine.inject))
    check_generation_conditions(plan.options)
    if not backend.dry_run:
        check_task_data(plan.options)
    backend.preflight(plan)
    if speculative and plan.baseline_run is not None:
        check_named_baseline(plan.baseline_run, backend.declared_identity(), plan.options, plan.out)


def check_out_folder(out: str) -> None:
    """--out names a folder that is there or can be made: not a file, nor under one, and writable."""
    path = Path(out).expanduser()
    if path.exists() and not path.is_dir():
        raise UserError(f"--out {out} is a file, not a folder for runs")
    existing = next((p for p in (path, *path.parents) if p.exists()), None)
    if existing is not None and not existing.is_dir():
        raise UserError(f"--out {out}: {existing} is a file, so no folder can be made under it")
    if existing is not None and not os.access(existing, os.W_OK | os.X_OK):
        raise UserError(f"--out {out}: {existing} is not writable")


def check_acceptance_options(plan: RunPlan, speculative: bool, injects: bool) -> None:
    """--acceptance-refs is a readable references file (or a name for one), and --populate-acceptance can write it
    and has something clean to write: checked before anything runs."""
    from ..gates.acceptance import ACCEPTANCE_PATH
    from ..gates.acceptance_file import check_writable, load_acceptance_references

    refs = plan.options.acceptance_refs
    path = Path(refs).expanduser() if refs is not None else ACCEPTANCE_PATH
    if refs is not None:
        load_acceptance_references(path)  # a folder, unreadable text or bad YAML: one line now, not after the run
    if not plan.populate_acceptance:
        return
    if not speculative:
        raise UserError(
            "--populate-acceptance needs --spec: a run without speculative decoding has no acceptance length"
        )
    if injects:
        raise UserError("--populate-acceptance writes a reference only from a clean run; leave out --inject")
    check_writable(path)


def check_generation_conditions(options: EvalOptions) -> None:
    """Each task's conditions can be built (evals/conditions/): generation kwargs the task can take, repeats only
    when sampling, chat-template kwargs only with the template. (Repeats combine with --early-stop and a sequential
    `ab`: their designs count documents and judge per-document means, evals/sequential/.)"""
    for spec in options.tasks:
        options.conditions_for(spec)


def check_task_data(options: EvalOptions) -> None:
    """Each task's data is there and has the expected schema (`data_check`), and --num-fewshot fits it."""
    from ..tasks.registry import max_fewshot, source_for

    for spec in options.tasks:
        source = source_for(spec, options.data_dir)
        most = max_fewshot(spec, source)
        if options.num_fewshot is not None and most is not None and options.num_fewshot > most:
            raise UserError(
                f"--num-fewshot {options.num_fewshot}: {spec.name} has only {most} examples to draw "
                f"shots from ({source.origin})"
            )
