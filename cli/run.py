"""`specdec-eval run`: evaluate the engine on GSM8K / GPQA-Diamond and gate each score against its reference."""

from __future__ import annotations

import json
import sys
import time
from typing import Annotated, Any

import typer

from . import options as o
from .progress import generation_progress

EVAL = "Evaluation"


def run(
    tasks: Annotated[
        str,
        typer.Option("--tasks", "-t", help="Comma-separated: gsm8k, gpqa_diamond, gsm8k_smoke, gpqa_diamond_smoke.",
                     rich_help_panel=EVAL),
    ] = "gsm8k",  # fmt: skip
    limit: Annotated[
        int | None, typer.Option("--limit", help="First N documents of each task (default: all).", rich_help_panel=EVAL)
    ] = None,
    num_fewshot: Annotated[
        int | None, typer.Option("--num-fewshot", help="Override the task's shots (GSM8K 5, GPQA 0).",
                                 rich_help_panel=EVAL),
    ] = None,  # fmt: skip
    max_output_len: Annotated[
        int | None, typer.Option("--max-output-len", help="Generated tokens per sample (GSM8K 256, GPQA 1024).",
                                 rich_help_panel=EVAL),
    ] = None,  # fmt: skip
    apply_chat_template: Annotated[
        bool, typer.Option("--apply-chat-template", help="Render prompts with the model's chat template, few-shot "
                           "as multi-turn.", rich_help_panel=EVAL),
    ] = False,  # fmt: skip
    data_dir: Annotated[
        str | None, typer.Option("--data-dir", help="Folder with gsm8k/ and gpqa/ data (else $SPECDEC_EVAL_DATA, else "
                                 "the Hugging Face cache/hub).", rich_help_panel=EVAL),
    ] = None,  # fmt: skip
    eval_seed: Annotated[
        int, typer.Option("--eval-seed", help="lm-eval random seed and the GPQA choice shuffle.", rich_help_panel=EVAL)
    ] = 0,
    no_reference: Annotated[
        bool, typer.Option("--no-reference", help="Only report scores; no reference lookup, no gate.",
                           rich_help_panel=EVAL),
    ] = False,  # fmt: skip
    model_key: Annotated[
        str | None, typer.Option("--model-key", help="Reference key of the model (default: derived from --model).",
                                 rich_help_panel=EVAL),
    ] = None,  # fmt: skip
    json_out: Annotated[bool, typer.Option("--json", help="Print the summary as JSON on stdout.")] = False,
    model: o.Model = o.E.model,
    kv_cache: o.KVCache = o.K.version,
    dtype: o.DType = o.E.dtype,
    device: o.Device = o.E.device,
    device_memory: o.DeviceMemory = None,
    max_batch_size: o.MaxBatch = o.E.max_batch_size,
    max_num_tokens: o.MaxNumTokens = o.E.max_num_tokens,
    max_seq_len: o.MaxSeqLen = None,
    seed: o.Seed = o.E.seed,
    spec: o.Spec = "none",
    draft_len: o.DraftLen = o.S.max_draft_len,
    draft_model: o.DraftModel = o.S.draft_model,
    spec_guard: o.SpecGuard = o.S.guard,
    inject: o.Inject = None,
    max_retries: o.MaxRetries = o.E.max_retries,
    warmup: o.Warmup = o.E.warmup,
) -> None:
    """Score tasks through lm-eval on our engine, then test each score against its reference.

    Prints, per task: score (mean of the strict-match and flexible-extract filters, 0-100), reference, threshold,
    theta and the verdict (PASS / FAIL, or NO-GATE when the threshold is below the floor and the gate cannot fail),
    plus acceptance metrics under spec-dec. Exit status 1 when a task fails or a request failed.

    Examples:
      specdec-eval run --tasks gsm8k --limit 50 --data-dir ../shared/data
      specdec-eval run --tasks gsm8k,gpqa_diamond --spec eagle3 --kv-cache v2 --data-dir ../shared/data
      specdec-eval run --tasks gsm8k_smoke --model tiny --no-reference     # offline demo, no real data
    """  # fmt: skip
    from ..evals.runner import EvalOptions, evaluate
    from ..evals.tasks import parse_tasks
    from ..workers.engine import Engine

    options = EvalOptions(
        tasks=parse_tasks(tasks), data_dir=data_dir, limit=limit, num_fewshot=num_fewshot,
        max_output_len=max_output_len, apply_chat_template=apply_chat_template, seed=eval_seed,
        no_reference=no_reference, model_key=model_key,
    )  # fmt: skip
    config = o.engine_config(
        model=model, kv_cache=kv_cache, dtype=dtype, device=device, device_memory=device_memory,
        max_batch_size=max_batch_size, max_num_tokens=max_num_tokens, max_seq_len=max_seq_len, seed=seed,
        spec=o.spec_config(spec, draft_len, draft_model, spec_guard), inject=inject, max_retries=max_retries,
        warmup=warmup,
    )  # fmt: skip
    engine = Engine(config)
    start = time.perf_counter()
    with generation_progress(0, enabled=True) as progress:
        results = evaluate(engine, options, progress)
    elapsed = time.perf_counter() - start
    summary = summarise(results, engine, elapsed)
    if json_out:
        print(json.dumps(summary, indent=2))
    else:
        print_report(results, summary)
    if summary["verdict"] == "FAIL":
        raise typer.Exit(1)


def summarise(results, engine, elapsed_s: float) -> dict[str, Any]:
    events = engine.events.counts()
    from ..workers.events import failing_events

    failing = failing_events(engine.events.events)
    tasks = {}
    for r in results:
        tasks[r.task] = {
            "num_samples": r.num_samples,
            "score": round(r.score, 4),
            "filter_scores": {k: round(v, 4) for k, v in r.filter_scores.items()},
            "reference": r.reference.accuracy if r.reference else None,
            "threshold": round(r.threshold, 4) if r.threshold is not None else None,
            "theta": round(r.theta, 4) if r.theta is not None else None,
            "verdict": r.verdict,
            "num_failed_requests": r.num_failed_requests,
            "acceptance": r.acceptance,
            "data": r.data_origin,
        }
    verdicts = [t["verdict"] for t in tasks.values()]
    verdict = "FAIL" if "FAIL" in verdicts or failing else "PASS"
    return {"verdict": verdict, "tasks": tasks, "events": events, "failing_events": len(failing),
            "elapsed_s": round(elapsed_s, 1), "model": engine.config.model,
            "kv_cache": engine.config.kv_cache.version,
            "spec": engine.config.spec.algorithm if engine.config.spec else None}  # fmt: skip


def print_report(results, summary: dict[str, Any]) -> None:
    out = sys.stdout
    for r in results:
        print(f"\n{r.task}: {r.num_samples} samples from {r.data_origin}", file=out)
        print(r.report, file=out)
        scores = ", ".join(f"{k} {v:.2f}" for k, v in r.filter_scores.items())
        print(f"filters: {scores}; score = their mean = {r.score:.2f}", file=out)
        if r.acceptance:
            a = r.acceptance
            per_pos = ", ".join(f"{x:.2f}" for x in a["per_position_rate"])
            print(f"acceptance length {a['acceptance_length']:.3f} (incl. bonus token), rate "
                  f"{a['acceptance_rate']:.3f}, per position [{per_pos}]", file=out)  # fmt: skip
    print("", file=out)
    for name, t in summary["tasks"].items():
        ref = "no ref"
        if t["reference"] is not None:
            ref = f"ref {t['reference']:.2f} thr {t['threshold']:.2f} theta {t['theta']:.2f}"
        print(f"{name:<20} {t['score']:6.2f}  {ref:<32} {t['verdict']}", file=out)
    if summary["events"]:
        print("events: " + ", ".join(f"{k} {v}" for k, v in sorted(summary["events"].items())), file=out)
    print(f"run {summary['verdict']} in {summary['elapsed_s']:.0f} s", file=out)
