"""One evaluation: our tasks through lm-eval on one engine, scored per sample, checked against references.

The score of a task is the mean of its filters' exact-match scores on a 0-100 scale (TensorRT-LLM's lm-eval
bridge does the same when no single filter is chosen); each filter's score is reported too.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

from ...errors import UserError
from ...stats.clustered import clustered_score
from ...workers.interface import InferenceEngine
from ...workers.registry import spec_method
from ...workers.spec.metrics import run_acceptance
from ..conditions.reference import ConditionCheck, check_conditions
from ..gates.acceptance import reference_id
from ..gates.accuracy_gate import accuracy_gate
from ..gates.references import Reference, lookup
from ..lossless.scoring import spec_sampling as spec_sampling_of
from ..run_identity import model_key_for
from ..run_types import EvalOptions, TaskResult
from ..tasks.registry import TaskSpec, source_for, write_task_yamls
from ..tasks.subsets import SubsetPlan
from .task_records import TaskRecords, filter_mismatches, task_records


@dataclass(frozen=True)
class StopInputs:
    """What the sequential controller needs besides the references (only with --early-stop)."""

    test_id: str | None = None  # the acceptance tripwire's reference entry
    exact: bool = True  # float32/float64: any divergence from the baseline fails at once
    acceptance_refs: dict[str, Any] | None = None
    # (lm-eval task, doc id, repeat) -> the lossless baseline's token ids of that sample (None: not known); a paired
    # run has its twins
    baseline_tokens: Callable[[str, int, int], list[int] | None] | None = None


DEFAULT_FEWSHOT_SEED = 1234  # lm-eval's fewshot_random_seed default: the GSM8K shots every lm-eval user gets


def selection_for(engine: InferenceEngine, spec: TaskSpec, options: EvalOptions) -> dict[str, Any]:
    """The keys that pick a reference entry (see `references` for the matching rules)."""
    i = engine.identity
    return {
        "dtype": i.dtype,
        "quant_algo": None,
        "kv_cache_quant_algo": None,
        "spec_dec_algo": spec_method(i.spec).reference_algo if i.spec else None,
        "extra_acc_spec": "chat_template" if options.apply_chat_template else None,
        "kv_cache": i.kv_cache,
        "num_fewshot": spec.num_fewshot if options.num_fewshot is None else options.num_fewshot,
        "max_output_len": options.max_output_for(spec),
    }


def evaluate(
    engine: InferenceEngine,
    options: EvalOptions,
    progress: Callable | None = None,
    cache=None,
    pair_cache=None,
    stop_inputs: StopInputs | None = None,
    only: set[tuple[str, int]] | None = None,
) -> list[TaskResult]:
    """cache: an evals.pipeline.resume.GenerationCache; outputs found there are reused instead of generated again.
    pair_cache: paired decoding (a PairedEngine): the plain twins' outputs go there, for the baseline run.
    stop_inputs: what the sequential controller needs (with options.early_stop).
    only: evaluate just these (lm-eval task, doc id) of the planned documents (the baseline of an early-stopped paired
    run: what its spec-dec side evaluated); the rest are skipped."""
    from .lm_adapter import LMSession, SequentialStop, SpecDecLM
    from .lm_recording import OutputRecord, RecordingLM

    conditions = {spec.name: options.conditions_for(spec) for spec in options.tasks}
    references = {spec.name: _reference(engine, spec, options) for spec in options.tasks}
    sources = {spec.name: source_for(spec, options.data_dir) for spec in options.tasks}
    stopper, sequential = None, None
    if only is None and (options.early_stop or options.stop_file):
        inputs = stop_inputs or StopInputs()
        stopper = _stopper(engine, options, references, inputs)
        by_lm_name = {s.lm_eval_name: references[s.name] for s in options.tasks}
        sequential = SequentialStop(stopper, by_lm_name, inputs.baseline_tokens)
    max_gen_toks = {spec.lm_eval_name: options.max_output_for(spec) for spec in options.tasks}
    outputs = OutputRecord()
    loaded: dict[str, Any] = {}  # lm-eval task name -> its Task (each repeat is scored by its filters)
    seed_base = options.generation_kwargs.get("seed")  # the base of each sample's seed (`repeats`)

    def make_lm(tasks: dict[str, Any], plans: dict[str, Any]) -> RecordingLM:
        loaded.update(tasks)
        session = LMSession(
            max_gen_toks,
            options.logprobs,
            record_failures=True,
            progress=progress,
            cache=cache,
            pair_cache=pair_cache,
            tasks=tasks,
            plans=plans,
            only=frozenset(only) if only is not None else None,
            sequential=sequential,
            sample_seed_base=options.seed if seed_base is None else int(seed_base),
            template_kwargs=options.template_kwargs,
        )
        return RecordingLM(SpecDecLM(engine, session), outputs)

    raw, plans = _run_lm_eval(make_lm, options, sources)
    stopping = Stopping(stopper, only is not None)
    results = []
    for spec in options.tasks:
        name, reference = spec.lm_eval_name, references[spec.name]
        task = EvaluatedTask(
            spec,
            reference,
            plans[spec.name],
            sources[spec.name].origin,
            conditions[spec.name].to_dict(),
            _condition_check(conditions[spec.name], reference, options),
        )
        records = task_records(spec, raw["samples"][name], outputs, loaded.get(name), options.repeats)
        results.append(_task_result(task, records, raw["results"][name], stopping, engine.identity.max_draft_len))
    return results


@dataclass(frozen=True)
class EvaluatedTask:
    """One task as the run planned it: its definition, reference, document plan, data origin and conditions (with
    their check against the reference entry's)."""

    spec: TaskSpec
    reference: Reference | None
    plan: SubsetPlan
    origin: str
    conditions: dict[str, Any] | None = None
    check: ConditionCheck | None = None


@dataclass(frozen=True)
class Stopping:
    """How the run's documents may stop short: the sequential controller (--early-stop), or `only` (the baseline of
    an early-stopped paired run evaluates just the documents its run did)."""

    stopper: Any = None
    only: bool = False


def _condition_check(conditions, reference: Reference | None, options: EvalOptions) -> ConditionCheck | None:
    """The run's conditions against its reference entry's; None without one."""
    if reference is None:
        return None
    return check_conditions(conditions, reference.entry, options.accept_condition_mismatch)


def _task_result(
    task: EvaluatedTask, records: TaskRecords, lm_eval_results: dict[str, Any], stopping: Stopping, max_draft_len: int
) -> TaskResult:
    """A task's result, scored, cross-checked against lm-eval, its accuracy gate judged once. With several samples
    per document the score is the mean over documents of each document's mean (stats.clustered), and the
    gate's n the effective sample count of that clustered score."""
    spec, reference, plan, stopper = task.spec, task.reference, task.plan, stopping.stopper
    samples = records.samples
    n = len(samples)
    filters = spec.family.filters
    filter_scores = {f: 100.0 * sum(bool(s.correct.get(f)) for s in samples) / n if n else 0.0 for f in filters}
    scored = reference.score_filter if reference is not None and reference.score_filter else None
    # The mean of the filters, unless the reference was measured on one filter (then that one, as it was).
    score = filter_scores[scored] if scored in filter_scores else sum(filter_scores.values()) / len(filters)
    failed = sum(s.failed for s in samples)
    stopped, decision, design_note = None, None, None
    if stopper is not None:
        stopped, decision = stopper.record(spec.lm_eval_name), stopper.accuracy_decision(spec.lm_eval_name)
        design_note = stopper.design_note(spec.lm_eval_name)
    elif stopping.only:
        why = "the baseline of an early-stopped paired run: the documents its run evaluated"
        stopped = {"gate": "paired", "verdict": None, "n": n, "of": plan.n, "reason": why}
    first = [s for s in samples if s.repeat == 0]  # what lm-eval scored: its take_first keeps sample 0
    first_scores = {
        f: 100.0 * sum(bool(s.correct.get(f)) for s in first) / len(first) if first else 0.0 for f in filters
    }
    _check_against_lm_eval(spec, first_scores, lm_eval_results, complete=stopped is None)
    clustered = None
    if len(first) < n:  # several samples per document: not independent (stats.clustered)
        per_sample = (
            (lambda s: 100.0 * bool(s.correct.get(scored))) if scored in filter_scores else (lambda s: 100.0 * s.score)
        )
        groups: dict[Any, list[float]] = {}
        for s in samples:
            groups.setdefault(s.doc_id, []).append(per_sample(s))
        clustered = clustered_score(groups)
    documents = len({s.doc_id for s in samples})  # n counts samples: several per document with --repeats
    notes = _notes(documents, reference, plan, stopped) + ((design_note,) if design_note else ())
    accuracy = accuracy_gate(spec.name, score, n, reference, spec.floor, failed, decision, notes, clustered, task.check)
    per_request = records.acceptance
    return TaskResult(
        spec.name,
        spec.family.name,
        n,
        filter_scores,
        score,
        reference,
        accuracy,
        samples,
        acceptance=run_acceptance(per_request, max_draft_len) if per_request else None,
        acceptance_requests=[(d["num_cycles"], d["num_accepted_drafts"]) for d in per_request],
        acceptance_positions=[
            (d["num_cycles"], list(d["accepted_per_position"])) for d in per_request if d.get("accepted_per_position")
        ],
        num_failed_requests=failed,
        data_origin=task.origin,
        filter_mismatches=filter_mismatches(spec, records),
        n_total=plan.n_total,
        subset=plan.to_dict() if plan.n < plan.n_total or plan.how == "random" else None,
        stopped=stopped,
        conditions=task.conditions,
        clustered=clustered.to_dict() if clustered is not None else None,
    )


def _stopper(engine: InferenceEngine, options: EvalOptions, references: dict, inputs: StopInputs):
    """The sequential controller: each task's accuracy design comes from its reference (none without one)."""
    from ..sequential.accuracy import AccuracySequentialDesign
    from ..sequential.early_stop import EarlyStop

    by_name = {s.lm_eval_name: s for s in options.tasks}

    def design_for(task: str, n_max: int):
        spec = by_name[task]
        ref = references[spec.name]
        if ref is None or _condition_check(options.conditions_for(spec), ref, options).blocks:
            return None  # no accuracy stop against a reference measured under other conditions (the gate: NO-GATE)
        t = ref.hypothesis_test(n_max, floor=spec.floor)
        # n_max documents of options.repeats samples each: the design judges per-document means (its docstring)
        return AccuracySequentialDesign.for_batches(
            ref.accuracy,
            n_max,
            options.early_stop_batch,
            alpha=t.alpha,
            beta=t.beta,
            sigma=t.sigma,
            floor=spec.floor,
            repeats=options.repeats,
        )

    if options.stop_file:  # a passive side of a sequential A/B: the controller decides, not this run's gates
        return EarlyStop(lambda task, n: None, options.early_stop_batch, exact=False, stop_file=options.stop_file)
    temperatures = {s.lm_eval_name: options.conditions_for(s).temperature for s in options.tasks}
    spec_sampling = spec_sampling_of(engine.identity)
    reference_ids = (
        {
            s.lm_eval_name: reference_id(inputs.test_id, options.conditions_for(s).to_dict(), spec_sampling)
            for s in options.tasks
        }
        if inputs.test_id
        else {}
    )
    return EarlyStop(
        design_for,
        options.early_stop_batch,
        inputs.test_id,
        inputs.acceptance_refs,
        inputs.exact,
        engine.identity.max_draft_len,
        temperatures=temperatures,
        reference_ids=reference_ids,
    )


def _notes(n: int, reference: Reference | None, plan, stopped: dict[str, Any] | None) -> tuple[str, ...]:
    """What the accuracy gate's report adds: a subset (or an early stop) compared with a full-set reference, and where
    and why an early-stopped task stopped."""
    from ..tasks.subsets import subset_note

    how = "random" if plan.how == "random" or stopped is not None else plan.how
    note = subset_note(n, plan.n_total, how) if reference is not None else None
    notes = [note] if note else []
    if stopped is not None:
        notes.append(
            f"stopped early at {stopped['n']} of {stopped['of']} documents by the {stopped['gate']} gate: "
            f"{stopped['reason']}"
        )
    return tuple(notes)


def check_references(engine: InferenceEngine, options: EvalOptions) -> None:
    """Every task's reference can be found (UserError naming the one that cannot): checked before a run folder is
    made, so that a missing reference leaves nothing behind."""
    for spec in options.tasks:
        _reference(engine, spec, options)


def _reference(engine: InferenceEngine, spec: TaskSpec, options: EvalOptions) -> Reference | None:
    if options.no_reference or spec.smoke or spec.temperature:
        return None  # the smoke suite is never scored against the real references, nor sampling against greedy ones
    family = spec.family
    elsewhere = {"reference_dir": family.reference_dir} if family.reference_dir is not None else {}  # not shipped
    return lookup(
        family.name,
        model_key_for(engine, options.model_key),
        selection_for(engine, spec, options),
        conditions=options.conditions_for(spec),
        **elsewhere,
    )


def _simple_evaluate(**kwargs):
    import lm_eval

    return lm_eval.simple_evaluate(**kwargs)


def _run_lm_eval(make_lm: Callable, options: EvalOptions, sources) -> tuple[dict[str, Any], dict[str, Any]]:
    """lm-eval's evaluation of our tasks on the model `make_lm(tasks, plans)` builds once the tasks are loaded; returns
    its raw results and each task's SubsetPlan by our task name (the documents it evaluates, in the order the engine
    sees them)."""
    import datasets
    from lm_eval.tasks import TaskManager

    from ..tasks.subsets import plan_subset

    # lm-eval logs an example prompt at INFO (for a sealed task that would put question text into logs) and warns about
    # custom_dataset kwargs it does not need; its progress bars and datasets' would bury ours.
    logging.getLogger("lm_eval").setLevel(logging.ERROR)
    datasets.disable_progress_bars()
    with tempfile.TemporaryDirectory(prefix="specdec-tasks-") as tmp:
        folder = write_task_yamls(
            options.tasks, sources, Path(tmp), options.seed, options.generation_kwargs, options.repeats
        )
        manager = TaskManager(include_path=str(folder), include_defaults=False)
        try:
            tasks = manager.load([spec.lm_eval_name for spec in options.tasks])["tasks"]
            # A seeded random order for sequential verdicts and random subsets; lm-eval's order otherwise.
            sample = "random" if options.early_stop or options.stop_file else options.sample
            plans = {
                name: plan_subset(name, len(task.eval_docs), options.limit, sample, options.seed)
                for name, task in tasks.items()
            }
            lm = make_lm(tasks, plans)
            selection = {"limit": options.limit}
            if sample == "random":
                subsets = {n: p.samples for n, p in plans.items() if p.n < p.n_total}
                selection = {"samples": subsets} if subsets else {}
            # lm-eval asks git for the working folder's commit and lets git's "fatal:" line through outside a
            # checkout; the manifest records the commit of the code that ran, so its guess is not needed.
            with mock.patch("lm_eval.evaluator.get_git_commit_hash", lambda: None):
                raw = _simple_evaluate(
                    model=lm,
                    tasks=list(tasks.values()),
                    task_manager=manager,
                    num_fewshot=options.num_fewshot,
                    bootstrap_iters=0,
                    log_samples=True,
                    apply_chat_template=options.apply_chat_template,
                    fewshot_as_multiturn=options.apply_chat_template,
                    random_seed=options.seed,
                    fewshot_random_seed=DEFAULT_FEWSHOT_SEED,
                    verbosity="WARNING",
                    **selection,
                )
        except (FileNotFoundError, ConnectionError) as e:
            raise UserError(f"lm-eval could not load the task data: {str(e).splitlines()[0]}") from None
    if raw is None:
        raise RuntimeError("lm-eval returned no results")
    return raw, {spec.name: plans[spec.lm_eval_name] for spec in options.tasks}


def _check_against_lm_eval(
    spec: TaskSpec, filter_scores: dict[str, float], lm_eval_results: dict[str, Any], complete: bool = True
) -> None:
    """Our per-sample aggregation must reproduce lm-eval's own task scores (a mismatch is a harness bug and stops
    the run); lm-eval's aggregate covers every planned document, so this holds when all were evaluated (complete)."""
    for f, ours in filter_scores.items() if complete else ():
        theirs = 100.0 * float(lm_eval_results.get(f"exact_match,{f}", float("nan")))
        if abs(ours - theirs) > 1e-6:
            raise RuntimeError(f"{spec.name} {f}: our score {ours:.4f} != lm-eval's {theirs:.4f}")
