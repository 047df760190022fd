"""`specdec-eval run`: evaluate the engine on GSM8K / GPQA-Diamond and gate each score against its reference.

Options in, one call, printing out: every option is declared once, on the value it fills (the engine's options,
EvalOptions, RunPlan, JobOptions, EndpointOptions), and the run pipeline checks them all before anything starts."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from ..evals.gates.registry import parse_opt_in
from ..evals.run_types import EvalOptions, RunPlan
from ..launch.job_options import JobOptions
from ..peers.client.options import EndpointOptions
from ..results.run_summary import Verdict
from . import options as o
from .progress import generation_progress
from .run_report import print_report


@o.engine_options(exclude=("tp",))  # --tp is a job option here (JobOptions): its default comes from the layout
@o.dataclass_options(options=EvalOptions, plan=RunPlan, job=JobOptions, endpoint=EndpointOptions)
def run(
    ctx: typer.Context,
    json_out: Annotated[bool, typer.Option("--json", help="Print the summary as JSON on stdout.")] = False,
    *,
    options: EvalOptions,
    plan: RunPlan,
    job: JobOptions,
    endpoint: EndpointOptions,
    engine_flags: o.EngineFlags,
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
      specdec-eval run --endpoint http://127.0.0.1:8000 --serve-cmd "trtllm-serve MODEL --port 8000" --tasks gsm8k
    """
    from ..evals.pipeline.backends import RunTarget, backend_name, make_backend
    from ..evals.pipeline.run import run as run_pipeline
    from ..launch.job import JobFailed

    # Bad engine options fail here, before any model loads or process starts; a server declares only what was given
    # (and refuses --baseline paired only when it was asked for, not by default).
    parse_opt_in(plan.gates or ())  # an unknown opt-in gate or a bad setting: one line before anything runs
    target = RunTarget(engine_flags.config(), job, endpoint, o.given(ctx, ("kv_cache", "baseline")))
    try:
        summary = run_pipeline(plan, make_backend(backend_name(target), target), lambda: generation_progress(0))
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
    if summary.verdict == Verdict.FAIL or refused:
        raise typer.Exit(1)
