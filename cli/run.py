"""`specdec-eval run`: evaluate the engine on GSM8K / GPQA-Diamond and gate each score against its reference."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated, Literal

import typer

from ..errors import UserError
from ..evals.tasks.registry import TASKS
from ..launch.torchrun import TorchrunSpec
from . import endpoint_options as eo
from . import options as o
from .generate import _rank_events_path
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
    from ..evals.pipeline.backends import backend_class, make_backend
    from ..evals.pipeline.orchestration import BASELINE_MODES, RunPlan
    from ..evals.pipeline.orchestration import run as run_pipeline
    from ..evals.run_types import EvalOptions
    from ..evals.tasks.registry import parse_tasks
    from ..launch.job import JobFailed

    options = EvalOptions(
        tasks=parse_tasks(tasks), data_dir=data_dir, limit=limit, num_fewshot=num_fewshot,
        max_output_len=max_output_len, apply_chat_template=apply_chat_template, seed=eval_seed,
        no_reference=no_reference, model_key=model_key, sample=sample, early_stop=early_stop,
        early_stop_batch=early_stop_batch, acceptance_rtol=acceptance_rtol, acceptance_refs=acceptance_refs,
        stop_file=ab_stop_file,
    )  # fmt: skip
    # Bad engine options fail here, before any model loads or process starts.
    flags = engine_flags
    config = flags.config(events_path=_rank_events_path(flags["events_path"], gpus * nnodes))
    model, dtype, kv_cache, seed = flags["model"], flags["dtype"], flags["kv_cache"], flags["seed"]
    mode = baseline if baseline in BASELINE_MODES else "separate"
    plan = RunPlan(options, out, resume, None if baseline in BASELINE_MODES else baseline, populate_acceptance,
                   control=control)  # fmt: skip
    if baseline_endpoint is not None and endpoint is None:
        raise UserError("--baseline-endpoint needs --endpoint (the server under test)")
    if endpoint is not None and config.inject:
        raise UserError("--inject can never fire in an endpoint run: the faults are our engine's, not the server's")
    local_job = not (gpus > 1 or nnodes > 1 or dry_run)
    if endpoint is None and local_job and tp not in (None, 1):
        raise UserError("--tp > 1 needs --gpus (one process per TP rank)")
    # Every input checked before the pipeline creates a run folder: nothing is left half-written.
    check_out_folder(out)
    check_acceptance_options(acceptance_refs, populate_acceptance, config)
    if endpoint is not None or not dry_run:
        check_task_data(options)
    if endpoint is None:
        check_draft_model(config)
    if endpoint is not None:
        declared = dict(model=model, tokenizer=tokenizer, chat=chat, served_model=served_model, api_key=api_key,
                        concurrency=concurrency, timeout_s=request_timeout, max_retries=request_retries, seed=seed,
                        dtype=dtype, kv_cache=kv_cache if _given(ctx, "kv_cache") else None)  # fmt: skip
        backend = backend_class("endpoint").from_flags(endpoint, baseline_endpoint, declared, config)
    elif local_job:
        backend = make_backend("local", config, mode)
    else:
        torchrun = TorchrunSpec(gpus, nnodes, node_rank, rdzv_endpoint, rdzv_backend)
        backend = make_backend("torchrun", config, torchrun, tp, rank_timeout, mode, dry_run)
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


def check_acceptance_options(refs: str | None, populate: bool, config) -> None:
    """--acceptance-refs is a readable references file (or a name for one), and --populate-acceptance can write it
    and has something clean to write: checked before anything runs."""
    from ..evals.gates.acceptance import ACCEPTANCE_PATH, check_writable, load_acceptance_references

    path = Path(refs).expanduser() if refs is not None else ACCEPTANCE_PATH
    if refs is not None:
        load_acceptance_references(path)  # a folder, unreadable text or bad YAML: one line now, not after the run
    if not populate:
        return
    if config.spec is None:
        raise UserError("--populate-acceptance needs --spec: a run without speculative decoding has no acceptance "
                        "length")  # fmt: skip
    if config.inject:
        raise UserError("--populate-acceptance writes a reference only from a clean run; leave out --inject")
    check_writable(path)


def check_task_data(options) -> None:
    """Each task's data is there and has the expected schema (evals/tasks/data_check.py), and --num-fewshot fits it."""
    from ..evals.tasks.registry import max_fewshot, source_for

    for spec in options.tasks:
        source = source_for(spec, options.data_dir)
        most = max_fewshot(spec, source)
        if options.num_fewshot is not None and most is not None and options.num_fewshot > most:
            raise UserError(f"--num-fewshot {options.num_fewshot}: {spec.name} has only {most} examples to draw "
                            f"shots from ({source.origin})")  # fmt: skip


def check_draft_model(config) -> None:
    """A spec-dec run's draft head folder is read and matched to the target now, not after the baseline run.
    The defaults (the shipped or the random head, default capture layers) are skipped: nothing a user gave can be
    wrong there, and the check would parse the target's GGUF header once more."""
    spec = config.spec
    if spec is None or (spec.draft_model in ("auto", "random") and spec.capture_layers is None):
        return
    from ..workers.loading.checkpoint import load_checkpoint, preset_of
    from ..workers.spec.head_check import check_draft_model as check

    checkpoint = load_checkpoint(config.model)
    check(config.spec, checkpoint.config, preset_of(checkpoint) or config.model)


def _given(ctx: typer.Context, name: str) -> bool:
    source = ctx.get_parameter_source(name)
    return source is not None and source.name == "COMMANDLINE"
