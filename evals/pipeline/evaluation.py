"""One evaluation: our tasks through lm-eval on one engine, scored per sample, checked against references.

The score of a task is the mean of its filters' exact-match scores on a 0-100 scale (TensorRT-LLM's lm-eval
bridge does the same when no single filter is chosen); each filter's score is reported too.
"""

from __future__ import annotations

import hashlib
import logging
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

from ...errors import UserError
from ...workers.interface import InferenceEngine
from ...workers.spec.metrics import run_acceptance
from ...workers.spec.registry import spec_method
from ..gates.references import Reference, lookup
from ..run_identity import model_key_for
from ..run_types import EvalOptions, TaskResult
from ..tasks.registry import TaskSpec, source_for, write_task_yamls


@dataclass(frozen=True)
class StopInputs:
    """What the sequential controller needs besides the references (only with --early-stop)."""

    test_id: str | None = None  # the acceptance tripwire's reference entry
    exact: bool = True  # float32/float64: any divergence from the baseline fails at once
    acceptance_refs: dict[str, Any] | None = None
    # (lm-eval task, doc id) -> the lossless baseline's token ids (None: not known); a paired run has its twins
    baseline_tokens: Callable[[str, int], list[int] | None] | None = None


DEFAULT_FEWSHOT_SEED = 1234  # lm-eval's fewshot_random_seed default: the GSM8K shots every lm-eval user gets


def selection_for(engine: InferenceEngine, spec: TaskSpec, options: EvalOptions) -> dict[str, Any]:
    """The keys that pick a reference entry (see references.py for the matching rules)."""
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
    """cache: an evals.resume.GenerationCache; outputs found there are reused instead of generated again.
    pair_cache: paired decoding (a PairedEngine): the plain twins' outputs go there, for the baseline run.
    stop_inputs: what the sequential controller needs (with options.early_stop).
    only: evaluate just these (lm-eval task, doc id) of the planned documents (the baseline of an early-stopped paired
    run: what its spec-dec side evaluated); the rest are skipped."""
    from .lm_adapter import SpecDecLM

    references = {spec.name: _reference(engine, spec, options) for spec in options.tasks}
    sources = {spec.name: source_for(spec, options.data_dir) for spec in options.tasks}
    lm = SpecDecLM(
        engine=engine,
        max_gen_toks={spec.lm_eval_name: options.max_output_for(spec) for spec in options.tasks},
        progress=progress,
        cache=cache,
        record_failures=True,
        pair_cache=pair_cache,
        logprobs=options.logprobs,
    )
    stopper = None
    if only is not None:
        lm.only = only
    elif options.early_stop or options.stop_file:
        inputs = stop_inputs or StopInputs()
        stopper = _stopper(engine, options, references, inputs)
        lm.stop_early(stopper, {s.lm_eval_name: references[s.name] for s in options.tasks}, inputs.baseline_tokens)
    raw, plans = _run_lm_eval(lm, options, sources)
    results = []
    for spec in options.tasks:
        name = spec.lm_eval_name
        samples = _samples(spec, raw["samples"][name], lm)
        result = _score(spec, samples, references[spec.name], options)
        result.data_origin = sources[spec.name].origin
        plan = plans[name]
        result.n_total, result.subset = (
            plan.n_total,
            plan.to_dict() if plan.n < plan.n_total or plan.how == "random" else None,
        )
        if stopper is not None:
            _sequential_verdict(result, stopper, name)
        elif only is not None:
            result.stopped = {
                "gate": "paired",
                "verdict": None,
                "n": len(samples),
                "of": plan.n,
                "reason": "the baseline of an early-stopped paired run: the documents its run evaluated",
            }
        per_request = [s.pop("_acceptance") for s in samples if s.get("_acceptance")]
        if per_request:
            result.acceptance = run_acceptance(per_request, engine.identity.max_draft_len)
            result.acceptance_requests = [(d["num_cycles"], d["num_accepted_drafts"]) for d in per_request]
            result.acceptance_positions = [(d["num_cycles"], list(d["accepted_per_position"]))
                                           for d in per_request if d.get("accepted_per_position")]  # fmt: skip
        _check_against_lm_eval(spec, result, raw["results"][name], complete=result.stopped is None)
        _note_subset(result, plan)
        results.append(result)
    return results


def _stopper(engine: InferenceEngine, options: EvalOptions, references: dict, inputs: StopInputs):
    """The sequential controller: each task's accuracy design comes from its reference (none without one)."""
    from ..sequential.accuracy import AccuracySequentialDesign
    from ..sequential.early_stop import EarlyStop

    by_name = {s.lm_eval_name: s for s in options.tasks}

    def design_for(task: str, n_max: int):
        spec = by_name[task]
        ref = references[spec.name]
        if ref is None:
            return None
        t = ref.hypothesis_test(n_max, floor=spec.floor)
        return AccuracySequentialDesign.for_batches(ref.accuracy, n_max, options.early_stop_batch, alpha=t.alpha,
                                                    beta=t.beta, sigma=t.sigma, floor=spec.floor)  # fmt: skip

    if options.stop_file:  # a passive side of a sequential A/B: the controller decides, not this run's gates
        return EarlyStop(lambda task, n: None, options.early_stop_batch, exact=False, stop_file=options.stop_file)
    return EarlyStop(design_for, options.early_stop_batch, inputs.test_id, inputs.acceptance_refs, inputs.exact,
                     engine.identity.max_draft_len)  # fmt: skip


def _sequential_verdict(result: TaskResult, stopper, name: str) -> None:
    """Under --early-stop the accuracy verdict is the sequential design's (its error rates are the ones kept);
    a failed request still fails the task."""
    result.stopped = stopper.record(name)
    decision = stopper.accuracy_decision(name)
    if decision is not None and decision["verdict"] != "CONTINUE" and result.num_failed_requests == 0:
        result.verdict = decision["verdict"]
        result.report += f"\nsequential verdict at n={decision['n']}: {decision['verdict']} ({decision['reason']})"


def _note_subset(result: TaskResult, plan) -> None:
    """The reference gate says when it compares a subset (or an early stop) with a full-set reference."""
    from ..tasks.subsets import subset_note

    how = "random" if plan.how == "random" or result.stopped is not None else plan.how
    note = subset_note(result.num_samples, plan.n_total, how) if result.reference is not None else None
    if note:
        result.report += "\n" + note
    if result.stopped is not None:
        s = result.stopped
        result.report += f"\nstopped early at {s['n']} of {s['of']} documents by the {s['gate']} gate: {s['reason']}"


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
    return lookup(family.name, model_key_for(engine, options.model_key), selection_for(engine, spec, options),
                  **elsewhere)  # fmt: skip


def _simple_evaluate(**kwargs):
    import lm_eval

    return lm_eval.simple_evaluate(**kwargs)


def _run_lm_eval(lm, options: EvalOptions, sources) -> tuple[dict[str, Any], dict[str, Any]]:
    """lm-eval's evaluation of our tasks; returns its raw results and each task's SubsetPlan (the documents it
    evaluates, in the order the engine sees them)."""
    import datasets
    from lm_eval.tasks import TaskManager

    from ..tasks.subsets import plan_subset

    # lm-eval logs an example prompt at INFO (for a sealed task that would put question text into logs) and warns about
    # custom_dataset kwargs it does not need; its progress bars and datasets' would bury ours.
    logging.getLogger("lm_eval").setLevel(logging.ERROR)
    datasets.disable_progress_bars()
    with tempfile.TemporaryDirectory(prefix="specdec-tasks-") as tmp:
        folder = write_task_yamls(options.tasks, sources, Path(tmp), options.seed)
        manager = TaskManager(include_path=str(folder), include_defaults=False)
        try:
            tasks = manager.load([spec.lm_eval_name for spec in options.tasks])["tasks"]
            # A seeded random order for sequential verdicts and random subsets; lm-eval's order otherwise.
            sample = "random" if options.early_stop or options.stop_file else options.sample
            plans = {name: plan_subset(name, len(task.eval_docs), options.limit, sample, options.seed)
                     for name, task in tasks.items()}  # fmt: skip
            lm.plan(tasks, plans)
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
    return raw, plans


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _samples(spec: TaskSpec, entries: list[dict[str, Any]], lm) -> list[dict[str, Any]]:
    """One record per document, whatever lm-eval's per-(doc, filter) layout. The task's family says what a record
    keeps: a sealed family's (GPQA's) hold no question, choice or output text, only ids, hashes, what its
    extraction may keep (a letter) and correctness."""
    family = spec.family
    by_doc: dict[int, dict[str, Any]] = {}
    for entry in entries:
        doc_id = int(entry["doc_id"])
        if lm.was_skipped(spec.lm_eval_name, doc_id):
            continue  # an early-stopped task never evaluated this document
        filt = entry.get("filter", "none")
        target = str(entry["target"])  # per entry: lm-eval lists each document once per filter
        rec = by_doc.get(doc_id)
        if rec is None:
            out = lm.outputs.get((spec.lm_eval_name, doc_id))
            output_text = out.text if out is not None else ""
            rec = {
                "task": spec.name,
                "doc_id": doc_id,
                "doc_hash": entry.get("doc_hash"),
                "prompt_hash": entry.get("prompt_hash"),
                "target": family.target(target),
                "output": None if family.sealed else output_text,
                "output_hash": _hash(",".join(map(str, out.token_ids))) if out is not None else None,
                "num_output_tokens": len(out.token_ids) if out is not None else 0,
                # token ids, not text: what output identity and the first divergence are measured on
                "output_token_ids": list(out.token_ids) if out is not None else [],
                # per output token [logprob, top alternatives]: the lossless gate's margins (numbers and ids only)
                "logprobs": out.logprobs if out is not None else None,
                "finish_reason": out.finish_reason if out is not None else "missing",
                "error": out.error if out is not None else "no engine output for this document",
                "_acceptance": _acceptance_of(out),
                "acceptance_length": (out.stats.get("acceptance") or {}).get("acceptance_length") if out else None,
                "acceptance": _counts(out),  # the request's own counts: the report's AL by output length
            }
            if family.sealed:  # its output can quote the question: never stored readable
                rec["sealed_fields"] = ["output_token_ids", "logprobs"]
            by_doc[doc_id] = rec
        extracted = entry["filtered_resps"][0] if isinstance(entry["filtered_resps"], list) else entry["filtered_resps"]
        rec[f"extracted[{filt}]"] = family.extracted(str(extracted))
        rec[f"correct[{filt}]"] = bool(entry.get("exact_match", 0.0))
        # The family's own filters on the same generation: must agree with lm-eval's (_check_against_lm_eval)
        ours = family.own_extraction(rec["output"], filt, target) if rec["output"] is not None else None
        if ours is not None:
            rec[f"ours[{filt}]"] = ours
    return [by_doc[k] for k in sorted(by_doc)]


def _acceptance_of(out) -> dict[str, Any] | None:
    """One request's acceptance counts (our engine's counters, or a server's per-request fields; same layout)."""
    acc = out.stats.get("acceptance") if out is not None else None
    return acc or None


def _counts(out) -> dict[str, Any] | None:
    acc = _acceptance_of(out)
    keys = ("num_cycles", "num_draft_tokens", "num_accepted_drafts", "accepted_per_position", "max_draft_len")
    return {k: acc[k] for k in keys} if acc else None


def _score(spec: TaskSpec, samples: list[dict[str, Any]], reference: Reference | None, options: EvalOptions):
    n = len(samples)
    filters = spec.family.filters
    filter_scores = {f: 100.0 * sum(s[f"correct[{f}]"] for s in samples) / n if n else 0.0 for f in filters}
    scored = reference.score_filter if reference is not None and reference.score_filter else None
    # The mean of the filters, unless the reference was measured on one filter (then that one, as it was).
    score = filter_scores[scored] if scored in filter_scores else sum(filter_scores.values()) / len(filters)
    failed = sum(s["finish_reason"] in ("error", "missing") for s in samples)
    if reference is None:
        verdict, report, threshold, theta = "REPORT", f"{spec.name}: no reference (score only)", None, None
    else:
        test = reference.hypothesis_test(n, floor=spec.floor)
        verdict, report, threshold, theta = test.verdict(score), test.report(score), test.threshold, test.theta
    if failed:
        verdict = "FAIL"  # a failed request is never scored as a wrong answer and never passes silently
        report += f"\n{failed} of {n} requests FAILED (finish reason error): the run fails whatever its accuracy"
    return TaskResult(spec.name, spec.family.name, n, filter_scores, score, reference, threshold, theta, verdict,
                      report, samples, num_failed_requests=failed)  # fmt: skip


def _check_against_lm_eval(
    spec: TaskSpec, result: TaskResult, lm_eval_results: dict[str, Any], complete: bool = True
) -> None:
    """Our per-sample aggregation must reproduce lm-eval's own task scores (a mismatch is a harness bug and stops
    the run); lm-eval's aggregate covers every planned document, so this holds when all were evaluated (complete).
    A family's own filters (GSM8K's) are cross-checked on every sample; a disagreement is recorded in the result and
    reported, never silently fixed: lm-eval's value is the one scored."""
    for f, ours in result.filter_scores.items() if complete else ():
        theirs = 100.0 * float(lm_eval_results.get(f"exact_match,{f}", float("nan")))
        if abs(ours - theirs) > 1e-6:
            raise RuntimeError(f"{spec.name} {f}: our score {ours:.4f} != lm-eval's {theirs:.4f}")
    for s in result.samples:
        for f in spec.family.filters:
            ours = s.pop(f"ours[{f}]", None)
            theirs = (s[f"extracted[{f}]"], s[f"correct[{f}]"])
            if ours is not None and tuple(ours) != theirs:
                result.filter_mismatches.append({"doc_id": s["doc_id"], "filter": f, "ours": list(ours),
                                                 "lm_eval": list(theirs)})  # fmt: skip
