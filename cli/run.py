"""`specdec-eval run`: evaluate the engine on GSM8K / GPQA-Diamond and gate each score against its reference."""

from __future__ import annotations

import json
import sys
from typing import Annotated, Literal

import typer

from ..evals.tasks.registry import TASKS
from . import endpoint_options as eo
from . import options as o
from .progress import generation_progress
from .run_report import print_report

EVAL = "Evaluation"
JOB = "Job (torchrun)"
STORE = "Run store"
MAX_FEWSHOT = 64  # far past any prompt that fits a context; the task's own data bounds it further at run time
RDZV_BACKENDS = Literal["c10d", "static", "etcd", "etcd-v2"]
SAMPLE_CHOICES = Literal["first", "random"]  # evals/tasks/subsets.py: refused before any run folder is made


@o.engine_options(exclude=("tp",))
def run(
    ctx: typer.Context,
    tasks: Annotated[
        str,
        typer.Option(
            "--tasks",
            "-t",
            help=f"Comma-separated, from: {', '.join(TASKS)}.",
            rich_help_panel=EVAL,
        ),
    ] = "gsm8k",  # fmt: skip
    limit: Annotated[
        int | None,
        typer.Option("--limit", min=1, help="First N documents of each task (default: all).", rich_help_panel=EVAL),
    ] = None,
    num_fewshot: Annotated[
        int | None,
        typer.Option(
            "--num-fewshot",
            min=0,
            max=MAX_FEWSHOT,
            help="Override the task's shots (GSM8K 5, GPQA 0).",
            rich_help_panel=EVAL,
        ),
    ] = None,  # fmt: skip
    max_output_len: Annotated[
        int | None,
        typer.Option(
            "--max-output-len", min=1, help="Generated tokens per sample (GSM8K 256, GPQA 512).", rich_help_panel=EVAL
        ),
    ] = None,  # fmt: skip
    apply_chat_template: Annotated[
        bool,
        typer.Option(
            "--apply-chat-template",
            help="Render prompts with the model's chat template, few-shot as multi-turn.",
            rich_help_panel=EVAL,
        ),
    ] = False,  # fmt: skip
    data_dir: Annotated[
        str | None,
        typer.Option(
            "--data-dir",
            help="Folder with gsm8k/ and gpqa/ data (else $SPECDEC_EVAL_DATA, else the Hugging Face cache/hub).",
            rich_help_panel=EVAL,
        ),
    ] = None,  # fmt: skip
    eval_seed: Annotated[
        int,
        typer.Option(
            "--eval-seed", min=0, help="lm-eval random seed and the GPQA choice shuffle.", rich_help_panel=EVAL
        ),
    ] = 0,
    no_reference: Annotated[
        bool,
        typer.Option("--no-reference", help="Only report scores; no reference lookup, no gate.", rich_help_panel=EVAL),
    ] = False,  # fmt: skip
    model_key: Annotated[
        str | None,
        typer.Option(
            "--model-key", help="Reference key of the model (default: derived from --model).", rich_help_panel=EVAL
        ),
    ] = None,  # fmt: skip
    sample: Annotated[
        SAMPLE_CHOICES,
        typer.Option(
            "--sample",
            help="Which documents --limit takes: first (the first N) or random (a seeded random "
            "subset; first-N subsets are easier than the full set).",
            rich_help_panel=EVAL,
        ),
    ] = "first",  # fmt: skip
    early_stop: Annotated[
        bool,
        typer.Option(
            "--early-stop",
            help="Sequential verdict: documents in a seeded random order, a look after each "
            "batch; stop as soon as the accuracy test (alpha and power kept), the lossless gate (first "
            "divergent sample) or the acceptance tripwire decides.",
            rich_help_panel=EVAL,
        ),
    ] = False,  # fmt: skip
    early_stop_batch: Annotated[
        int,
        typer.Option("--early-stop-batch", min=1, help="Documents per look under --early-stop.", rich_help_panel=EVAL),
    ] = 64,
    populate_acceptance: Annotated[
        bool,
        typer.Option(
            "--populate-acceptance",
            help="Write this run's acceptance length as the reference of its test "
            "id (ref_al = AL, min_al = 0.95 AL), as TensorRT-LLM's populate switch does; only from a clean, "
            "passing run (no --inject, no FAILed gate, failing event or failed request), saying how many "
            "documents it rests on.",
            rich_help_panel=EVAL,
        ),
    ] = False,  # fmt: skip
    acceptance_rtol: Annotated[
        float,
        typer.Option(
            "--acceptance-rtol",
            min=0.0,
            max=0.99,
            help="Relative tolerance of the acceptance-length gate around ref_al, in either direction.",
            rich_help_panel=EVAL,
        ),
    ] = 0.05,  # fmt: skip
    acceptance_refs: Annotated[
        str | None,
        typer.Option(
            "--acceptance-refs",
            help="Acceptance-length references file (TensorRT-LLM's layout; default: "
            "the shipped evals/references/acceptance_length.yaml).",
            rich_help_panel=EVAL,
        ),
    ] = None,  # fmt: skip
    ab_stop_file: Annotated[
        str | None, typer.Option("--ab-stop-file", hidden=True, help="A side of a sequential `ab` (set by ab).")
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the summary as JSON on stdout.")] = False,
    out: Annotated[
        str, typer.Option("--out", help="Runs folder: each run is written to OUT/<run id>/.", rich_help_panel=STORE)
    ] = "runs",
    resume: Annotated[
        bool | None,
        typer.Option(
            "--resume/--fresh",
            help="Resume the newest unfinished run of this exact configuration, or "
            "start afresh (default: resume when one exists).",
            rich_help_panel=STORE,
        ),
    ] = None,  # fmt: skip
    gpus: Annotated[
        int,
        typer.Option(
            "--gpus",
            min=1,
            help="Ranks per node: >1 starts a torchrun job (CPU ranks over gloo when there is no CUDA).",
            rich_help_panel=JOB,
        ),
    ] = 1,  # fmt: skip
    tp: Annotated[
        int | None,
        typer.Option(
            "--tp",
            min=1,
            help="Tensor-parallel size (default: the largest that divides --gpus and "
            "the model's heads; the other ranks are data-parallel replicas).",
            rich_help_panel=JOB,
        ),
    ] = None,  # fmt: skip
    nnodes: Annotated[
        int, typer.Option("--nnodes", min=1, help="Nodes (passed to torchrun).", rich_help_panel=JOB)
    ] = 1,
    node_rank: Annotated[
        int | None,
        typer.Option("--node-rank", min=0, help="This node's rank (passed to torchrun).", rich_help_panel=JOB),
    ] = None,
    rdzv_endpoint: Annotated[
        str | None, typer.Option("--rdzv-endpoint", help="host:port (passed to torchrun).", rich_help_panel=JOB)
    ] = None,
    rdzv_backend: Annotated[
        RDZV_BACKENDS | None,
        typer.Option(
            "--rdzv-backend", help="c10d | static | etcd | etcd-v2 (passed to torchrun).", rich_help_panel=JOB
        ),
    ] = None,  # fmt: skip
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run", help="Print the torchrun command and the rank mapping; start nothing.", rich_help_panel=JOB
        ),
    ] = False,  # fmt: skip
    rank_timeout: Annotated[
        float,
        typer.Option(
            "--rank-timeout",
            min=1.0,
            help="Seconds a collective may wait for a rank before failing.",
            rich_help_panel=JOB,
        ),
    ] = 600.0,  # fmt: skip
    endpoint: eo.Endpoint = None,
    chat: eo.Chat = False,
    tokenizer: eo.Tokenizer = None,
    served_model: eo.ServedModel = None,
    api_key: eo.ApiKey = None,
    concurrency: eo.Concurrency = eo.DEFAULTS["concurrency"],
    request_timeout: eo.RequestTimeout = eo.DEFAULTS["timeout"],
    request_retries: eo.RequestRetries = eo.DEFAULTS["retries"],
    baseline_endpoint: eo.BaselineEndpoint = None,
    baseline: eo.BaselineRun = "paired",
    control: eo.Control = None,
    engine_flags: o.EngineFlags | None = None,  # every engine option but --tp, a job option here (cli/options.py)
) -> None:
    """Score tasks through lm-eval on our engine (or any OpenAI-compatible server), then test each score against its
    reference.

    Prints, per task: score (mean of the strict-match and flexible-extract filters, 0-100), reference, threshold,
    theta and the verdict (PASS / FAIL, or NO-GATE when the threshold is below the floor and the gate cannot fail),
    plus acceptance metrics under spec-dec. Exit status 1 when a task fails or a request failed.

    Examples:
      specdec-eval run --tasks gsm8k --limit 50 --data-dir ../shared/data
      specdec-eval run --tasks gsm8k,gpqa_diamond --spec eagle3 --kv-cache v2 --data-dir ../shared/data
      specdec-eval run --tasks gsm8k_smoke --model tiny --no-reference     # offline demo, no real data
      specdec-eval run --endpoint http://127.0.0.1:8000 --tasks gsm8k --limit 50 --data-dir ../shared/data
      specdec-eval run --endpoint URL --spec eagle3 --draft-len 3 --baseline-endpoint URL0 --tasks gsm8k
      specdec-eval run --tasks gsm8k --limit 32 --sample random --spec eagle3 --dtype bfloat16 --control
    """  # fmt: skip
    from ..evals.pipeline.backends import RunTarget, backend_name, make_backend
    from ..evals.pipeline.run import run as run_pipeline
    from ..evals.run_types import EvalOptions, RunPlan
    from ..evals.tasks.registry import parse_tasks
    from ..launch.job import JobFailed
    from ..launch.job_options import JobOptions
    from ..workers.remote.endpoint_options import EndpointOptions

    options = EvalOptions(
        tasks=parse_tasks(tasks), data_dir=data_dir, limit=limit, num_fewshot=num_fewshot,
        max_output_len=max_output_len, apply_chat_template=apply_chat_template, seed=eval_seed,
        no_reference=no_reference, model_key=model_key, sample=sample, early_stop=early_stop,
        early_stop_batch=early_stop_batch, acceptance_rtol=acceptance_rtol, acceptance_refs=acceptance_refs,
        stop_file=ab_stop_file,
    )  # fmt: skip
    plan = RunPlan(options, out, resume, baseline, populate_acceptance, control=control)
    job = JobOptions(gpus, tp, nnodes, node_rank, rdzv_endpoint, rdzv_backend, dry_run, rank_timeout)
    endpoints = EndpointOptions(endpoint, chat, tokenizer, served_model, api_key, concurrency, request_timeout,
                                request_retries, baseline_endpoint)  # fmt: skip
    # Bad engine options fail here, before any model loads or process starts.
    declared = frozenset(name for name in ("kv_cache",) if _given(ctx, name))
    target = RunTarget(engine_flags.config(), job, endpoints, declared)
    backend = make_backend(backend_name(target), target)
    try:
        summary = run_pipeline(plan, backend, progress_for=lambda: generation_progress(0))
    except JobFailed as e:
        print(f"specdec-eval: error: run failed: {e}", file=sys.stderr)
        raise typer.Exit(e.code) from None
    if summary is None:  # a dry run: the job was printed, nothing ran
        return
    if json_out:
        print(json.dumps(summary.to_json(), indent=2))
    else:
        print_report(summary)
    refused = (summary.acceptance_populated or {}).get("refused")
    if refused:  # asked for, not done: the status says so even when the run itself passed
        print(f"specdec-eval: --populate-acceptance: reference not written: {refused}", file=sys.stderr)
    if summary.verdict == "FAIL" or refused:
        raise typer.Exit(1)


def _given(ctx: typer.Context, name: str) -> bool:
    source = ctx.get_parameter_source(name)
    return source is not None and source.name == "COMMANDLINE"
