"""One evaluation: our tasks through lm-eval on one engine, scored per sample, checked against references.

The score of a task is the mean of its filters' exact-match scores on a 0-100 scale (TensorRT-LLM's lm-eval
bridge does the same when no single filter is chosen); each filter's score is reported too.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

# lm-eval draws a tqdm bar per task; ours is the progress callback. tqdm reads this when it is first imported.
os.environ.setdefault("TQDM_DISABLE", "1")

from ..workers.errors import UserError  # noqa: E402
from ..workers.interface import InferenceEngine
from ..workers.spec.metrics import AcceptanceStats
from . import gsm8k
from .references import Reference, lookup
from .tasks import FILTERS, TaskSpec, parse_tasks, source_for, write_task_yamls

DEFAULT_FEWSHOT_SEED = 1234  # lm-eval's fewshot_random_seed default: the GSM8K shots every lm-eval user gets


@dataclass
class EvalOptions:
    tasks: list[TaskSpec]
    data_dir: str | None = None
    limit: int | None = None
    num_fewshot: int | None = None  # None: the task's own (GSM8K 5, GPQA 0)
    max_output_len: int | None = None  # None: the task's own
    apply_chat_template: bool = False
    seed: int = 0  # lm-eval random_seed, and the GPQA choice shuffle
    no_reference: bool = False
    model_key: str | None = None

    def max_output_for(self, spec: TaskSpec) -> int:
        return self.max_output_len or spec.max_output_len

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (a torchrun job's payload); tasks by name."""
        return {**{k: v for k, v in asdict(self).items() if k != "tasks"}, "tasks": [t.name for t in self.tasks]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EvalOptions:
        return cls(**{**d, "tasks": parse_tasks(list(d["tasks"]))})


@dataclass
class TaskResult:
    task: str
    family: str
    num_samples: int
    filter_scores: dict[str, float]  # 0-100
    score: float  # mean over filters, 0-100
    reference: Reference | None
    threshold: float | None
    theta: float | None
    verdict: str  # PASS | FAIL | NO-GATE | REPORT (no reference)
    report: str
    samples: list[dict[str, Any]] = field(default_factory=list)
    acceptance: dict[str, Any] | None = None
    num_failed_requests: int = 0
    data_origin: str = ""
    filter_mismatches: list[dict[str, Any]] = field(default_factory=list)  # our GSM8K filters vs lm-eval's


def model_key_for(engine: InferenceEngine, explicit: str | None) -> str:
    """The references' model key: --model-key, else a known name for the presets, else the checkpoint's
    Hugging Face name (config.json _name_or_path) or folder name."""
    if explicit:
        return explicit
    model = engine.identity.model
    if model == "smollm2":
        return "HuggingFaceTB/SmolLM2-135M-Instruct"
    name = getattr(engine.tokenizer, "name_or_path", "") or ""
    return name if name and "/" in name and not os.path.isabs(name) else Path(model).name


def selection_for(engine: InferenceEngine, spec: TaskSpec, options: EvalOptions) -> dict[str, Any]:
    """The keys that pick a reference entry (see references.py for the matching rules)."""
    i = engine.identity
    return {
        "dtype": i.dtype,
        "quant_algo": None,
        "kv_cache_quant_algo": None,
        "spec_dec_algo": "Eagle3" if i.spec == "eagle3" else i.spec,
        "extra_acc_spec": "chat_template" if options.apply_chat_template else None,
        "kv_cache": i.kv_cache,
        "num_fewshot": spec.num_fewshot if options.num_fewshot is None else options.num_fewshot,
        "max_output_len": options.max_output_for(spec),
    }


def evaluate(
    engine: InferenceEngine, options: EvalOptions, progress: Callable | None = None, cache=None, pair_cache=None
) -> list[TaskResult]:
    """cache: an evals.resume.GenerationCache; outputs found there are reused instead of generated again.
    pair_cache: paired decoding (a PairedEngine): the plain twins' outputs go there, for the baseline run."""
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
    )
    raw = _run_lm_eval(lm, options, sources)
    results = []
    for spec in options.tasks:
        name = spec.lm_eval_name
        samples = _samples(spec, raw["samples"][name], lm)
        result = _score(spec, samples, references[spec.name], options)
        result.data_origin = sources[spec.name].origin
        stats = [s.pop("_acceptance") for s in samples if s.get("_acceptance")]
        if stats:
            total = AcceptanceStats(engine.identity.max_draft_len)
            for st in stats:
                total.merge(st)
            result.acceptance = total.to_dict()
        _check_against_lm_eval(spec, result, raw["results"][name])
        results.append(result)
    return results


def _reference(engine: InferenceEngine, spec: TaskSpec, options: EvalOptions) -> Reference | None:
    if options.no_reference or spec.smoke:
        return None  # the smoke suite is never scored against the real references
    selection = selection_for(engine, spec, options)
    return lookup(spec.family, model_key_for(engine, options.model_key), selection)


def _run_lm_eval(lm, options: EvalOptions, sources) -> dict[str, Any]:
    import datasets
    import lm_eval
    from lm_eval.tasks import TaskManager

    # lm-eval logs an example prompt at INFO (for GPQA that would put question text into logs) and warns about
    # custom_dataset kwargs it does not need; its progress bars and datasets' would bury ours.
    logging.getLogger("lm_eval").setLevel(logging.ERROR)
    datasets.disable_progress_bars()
    with tempfile.TemporaryDirectory(prefix="specdec-tasks-") as tmp:
        folder = write_task_yamls(options.tasks, sources, Path(tmp), options.seed)
        manager = TaskManager(include_path=str(folder), include_defaults=False)
        try:
            raw = lm_eval.simple_evaluate(
                model=lm,
                tasks=[spec.lm_eval_name for spec in options.tasks],
                task_manager=manager,
                num_fewshot=options.num_fewshot,
                limit=options.limit,
                bootstrap_iters=0,
                log_samples=True,
                apply_chat_template=options.apply_chat_template,
                fewshot_as_multiturn=options.apply_chat_template,
                random_seed=options.seed,
                fewshot_random_seed=DEFAULT_FEWSHOT_SEED,
                verbosity="WARNING",
            )
        except (FileNotFoundError, ConnectionError) as e:
            raise UserError(f"lm-eval could not load the task data: {str(e).splitlines()[0]}") from None
    if raw is None:
        raise RuntimeError("lm-eval returned no results")
    return raw


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _samples(spec: TaskSpec, entries: list[dict[str, Any]], lm) -> list[dict[str, Any]]:
    """One record per document, whatever lm-eval's per-(doc, filter) layout. GPQA records hold no question,
    choice or output text: only ids, hashes, the extracted letter and correctness."""
    by_doc: dict[int, dict[str, Any]] = {}
    for entry in entries:
        doc_id = int(entry["doc_id"])
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
                "target": gsm8k.final_answer(target) if spec.family == "gsm8k" else target,
                "output": None if spec.family == "gpqa_diamond" else output_text,
                "output_hash": _hash(",".join(map(str, out.token_ids))) if out is not None else None,
                "num_output_tokens": len(out.token_ids) if out is not None else 0,
                # token ids, not text: what output identity and the first divergence are measured on
                "output_token_ids": list(out.token_ids) if out is not None else [],
                "finish_reason": out.finish_reason if out is not None else "missing",
                "error": out.error if out is not None else "no engine output for this document",
                "_acceptance": _acceptance_of(out),
                "acceptance_length": (out.stats.get("acceptance") or {}).get("acceptance_length") if out else None,
            }
            by_doc[doc_id] = rec
        extracted = entry["filtered_resps"][0] if isinstance(entry["filtered_resps"], list) else entry["filtered_resps"]
        rec[f"extracted[{filt}]"] = gpqa_letter(str(extracted)) if spec.family == "gpqa_diamond" else str(extracted)
        rec[f"correct[{filt}]"] = bool(entry.get("exact_match", 0.0))
        if spec.family == "gsm8k" and rec["output"] is not None:
            # Our own filters on the same generation: must agree with lm-eval's (checked in _check_against_lm_eval)
            ours = gsm8k.extract(rec["output"], filt)
            rec[f"ours[{filt}]"] = (ours, gsm8k.is_correct(ours, target))
    return [by_doc[k] for k in sorted(by_doc)]


def gpqa_letter(extracted: str) -> str:
    """What a GPQA record may keep of an extraction: the letter. lm-eval's strict-match captures whatever follows
    "The answer is ", which can quote a choice's text, and GPQA text must never be stored."""
    m = re.match(r"\(?([A-D])\)?(?![A-Za-z])", extracted.strip())
    if m:
        return f"({m.group(1)})"
    return extracted if extracted == "[invalid]" else "[other]"


def _acceptance_of(out) -> AcceptanceStats | None:
    acc = out.stats.get("acceptance") if out is not None else None
    return AcceptanceStats.from_dict(acc) if acc else None


def _score(spec: TaskSpec, samples: list[dict[str, Any]], reference: Reference | None, options: EvalOptions):
    n = len(samples)
    filters = FILTERS[spec.family]
    filter_scores = {f: 100.0 * sum(s[f"correct[{f}]"] for s in samples) / n if n else 0.0 for f in filters}
    score = sum(filter_scores.values()) / len(filters)
    failed = sum(s["finish_reason"] in ("error", "missing") for s in samples)
    if reference is None:
        verdict, report, threshold, theta = "REPORT", f"{spec.name}: no reference (score only)", None, None
    else:
        test = reference.hypothesis_test(n, floor=spec.floor)
        verdict, report, threshold, theta = test.verdict(score), test.report(score), test.threshold, test.theta
    if failed:
        verdict = "FAIL"  # a failed request is never scored as a wrong answer and never passes silently
        report += f"\n{failed} of {n} requests FAILED (finish reason error): the run fails whatever its accuracy"
    return TaskResult(spec.name, spec.family, n, filter_scores, score, reference, threshold, theta, verdict, report,
                      samples, num_failed_requests=failed)  # fmt: skip


def _check_against_lm_eval(spec: TaskSpec, result: TaskResult, lm_eval_results: dict[str, Any]) -> None:
    """Our per-sample aggregation must reproduce lm-eval's own task scores (a mismatch is a harness bug and stops
    the run). Our GSM8K filters are cross-checked on every sample; a disagreement is recorded in the result and
    reported, never silently fixed: lm-eval's value is the one scored."""
    for f, ours in result.filter_scores.items():
        theirs = 100.0 * float(lm_eval_results.get(f"exact_match,{f}", float("nan")))
        if abs(ours - theirs) > 1e-6:
            raise RuntimeError(f"{spec.name} {f}: our score {ours:.4f} != lm-eval's {theirs:.4f}")
    for s in result.samples:
        for f in FILTERS[spec.family]:
            ours = s.pop(f"ours[{f}]", None)
            theirs = (s[f"extracted[{f}]"], s[f"correct[{f}]"])
            if ours is not None and tuple(ours) != theirs:
                result.filter_mismatches.append({"doc_id": s["doc_id"], "filter": f, "ours": list(ours),
                                                 "lm_eval": list(theirs)})  # fmt: skip
