"""`specdec-eval run`: evaluate the engine on GSM8K / GPQA-Diamond and gate each score against its reference."""

from __future__ import annotations

import functools
import json
import sys
import time
from typing import Annotated, Any

import typer

from ..workers.errors import UserError
from . import options as o
from .progress import generation_progress

EVAL = "Evaluation"
JOB = "Job (torchrun)"
STORE = "Run store"


def run(
    ctx: typer.Context,
    tasks: Annotated[
        str,
        typer.Option(
            "--tasks",
            "-t",
            help="Comma-separated: gsm8k, gpqa_diamond, gsm8k_smoke, gpqa_diamond_smoke.",
            rich_help_panel=EVAL,
        ),
    ] = "gsm8k",  # fmt: skip
    limit: Annotated[
        int | None, typer.Option("--limit", help="First N documents of each task (default: all).", rich_help_panel=EVAL)
    ] = None,
    num_fewshot: Annotated[
        int | None,
        typer.Option("--num-fewshot", help="Override the task's shots (GSM8K 5, GPQA 0).", rich_help_panel=EVAL),
    ] = None,  # fmt: skip
    max_output_len: Annotated[
        int | None,
        typer.Option(
            "--max-output-len", help="Generated tokens per sample (GSM8K 256, GPQA 512).", rich_help_panel=EVAL
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
        int, typer.Option("--eval-seed", help="lm-eval random seed and the GPQA choice shuffle.", rich_help_panel=EVAL)
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
            help="Ranks per node: >1 starts a torchrun job (CPU ranks over gloo when there is no CUDA).",
            rich_help_panel=JOB,
        ),
    ] = 1,  # fmt: skip
    tp: Annotated[
        int | None,
        typer.Option(
            "--tp",
            help="Tensor-parallel size (default: the largest that divides --gpus and "
            "the model's heads; the other ranks are data-parallel replicas).",
            rich_help_panel=JOB,
        ),
    ] = None,  # fmt: skip
    nnodes: Annotated[int, typer.Option("--nnodes", help="Nodes (passed to torchrun).", rich_help_panel=JOB)] = 1,
    node_rank: Annotated[
        int | None, typer.Option("--node-rank", help="This node's rank (passed to torchrun).", rich_help_panel=JOB)
    ] = None,
    rdzv_endpoint: Annotated[
        str | None, typer.Option("--rdzv-endpoint", help="host:port (passed to torchrun).", rich_help_panel=JOB)
    ] = None,
    rdzv_backend: Annotated[
        str | None,
        typer.Option("--rdzv-backend", help="c10d | static | etcd (passed to torchrun).", rich_help_panel=JOB),
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
            "--rank-timeout", help="Seconds a collective may wait for a rank before failing.", rich_help_panel=JOB
        ),
    ] = 600.0,  # fmt: skip
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
    from ..evals.runner import EvalOptions
    from ..evals.tasks import parse_tasks, source_for
    from ..launch import job

    options = EvalOptions(
        tasks=parse_tasks(tasks), data_dir=data_dir, limit=limit, num_fewshot=num_fewshot,
        max_output_len=max_output_len, apply_chat_template=apply_chat_template, seed=eval_seed,
        no_reference=no_reference, model_key=model_key,
    )  # fmt: skip

    def config_for(tp_size: int, device_: str):
        return o.engine_config(
            model=model, kv_cache=kv_cache, dtype=dtype, device=device_, device_memory=device_memory,
            max_batch_size=max_batch_size, max_num_tokens=max_num_tokens, max_seq_len=max_seq_len, seed=seed,
            spec=o.spec_config(spec, draft_len, draft_model, spec_guard), inject=inject, max_retries=max_retries,
            warmup=warmup, tp=tp_size,
        )  # fmt: skip

    config_for(1, device)  # bad engine options fail here, before any process starts
    if job.in_torchrun_job():  # this process is one rank of a job that `run --gpus N` started
        from ..workers.checkpoint import load_checkpoint

        checkpoint = load_checkpoint(model)
        cfg = checkpoint.config
        job.rank_main(lambda t: config_for(t, device), cfg.num_attention_heads, cfg.num_key_value_heads, tp,
                      device, lambda engine: _drive(engine, options, out, resume), rank_timeout,
                      checkpoint)  # fmt: skip
        return  # the launcher prints the report from rank 0's summary
    if gpus > 1 or nnodes > 1 or dry_run:
        rank_args = lambda tp_, device_: rank_args_from_context(ctx, tp_, device_)  # noqa: E731
        summary = _launch(options, gpus, tp, nnodes, node_rank, rdzv_endpoint, rdzv_backend, dry_run, device, model,
                          rank_args, out, config_for)  # fmt: skip
        if summary is None:
            return
    else:
        if tp not in (None, 1):
            raise typer.BadParameter("--tp > 1 needs --gpus (one process per TP rank)", param_hint="--tp")
        for spec_ in options.tasks:
            source_for(spec_, options.data_dir)  # missing data: one clear error before the model loads
        from ..workers.engine import Engine

        config = config_for(1, device)
        if config.spec is not None and find_baseline(out, baseline_config(config), options) is None:
            print("lossless gate: running the non-speculative baseline first (reused by later runs)", file=sys.stderr)
            _drive(Engine(baseline_config(config)), options, out, resume)  # its own run folder; freed after
        summary = _drive(Engine(config), options, out, resume)
    if json_out:
        print(json.dumps(summary, indent=2))
    else:
        print_report(summary)
    if summary["verdict"] == "FAIL":
        raise typer.Exit(1)


def _drive(engine, options, out: str, resume: bool | None) -> dict[str, Any]:
    """Evaluate on this engine (local, or rank 0's handle on every replica), record the run, build the summary."""
    from ..evals.resume import GenerationCache
    from ..evals.runner import evaluate
    from ..results import manifest as mf
    from ..results import store

    world_size = engine.world.layout.world_size if hasattr(engine, "world") else 1
    config = run_config(engine.config, options)
    git = dict(_git_state())
    key = _run_key(engine.config, options)
    run = store.find_unfinished(out, key) if resume is not False else None
    if resume and run is None:
        raise UserError(f"--resume: no unfinished run of this configuration under {out}")
    resumed = run is not None
    run = run or store.new_run(out, key)
    started = time.time()
    manifest = {
        "run_id": run.run_id, "config_key": key, "test_id": test_id(engine, options), "config": config, **git,
        "versions": mf.versions(), "devices": mf.devices(), "world_size": world_size, "command": sys.argv,
        "started": started, "resumed": resumed,
    }  # fmt: skip
    run.write_manifest(manifest)
    cache = GenerationCache(run.partial_dir)
    if resumed:
        print(f"resuming run {run.run_id}: {len(cache.entries)} finished generations reused", file=sys.stderr)
    with generation_progress(0, enabled=True) as progress:
        results = evaluate(engine, options, progress, cache=cache)
    if hasattr(engine, "collect_events"):
        engine.collect_events()  # every rank's events, merged in time order
    summary = summarise(results, engine, time.time() - started)
    summary.update(run_id=run.run_id, run_dir=str(run.path), test_id=manifest["test_id"], world_size=world_size,
                   reused_generations=len(cache.entries) if resumed else 0)  # fmt: skip
    samples = [s for r in results for s in r.samples]
    if engine.config.spec is not None:
        _lossless_gate(summary, samples, engine, options, out, results)
    run.write_samples(samples)
    run.write_events(engine.events.events)
    run.write_summary(summary)
    run.write_manifest({**manifest, "finished": time.time(), "elapsed_s": round(time.time() - started, 1)})
    return summary


def _lossless_gate(summary, samples, engine, options, out, results) -> None:
    """Compare every spec-dec sample with the non-speculative baseline run of the same configuration."""
    from ..results.lossless import lossless_check
    from ..workers.device import resolve_dtype

    base = find_baseline(out, baseline_config(engine.config), options)
    dtype = str(resolve_dtype(engine.config.dtype, engine.local.device if hasattr(engine, "local") else engine.device))
    dtype = dtype.removeprefix("torch.")
    if base is None:
        for t in summary["tasks"].values():
            t["lossless"] = {"verdict": "NO-BASELINE", "reason": f"no finished baseline run under {out}"}
        return
    tolerances = {r.task: (r.reference.entry.get("lossless_tolerance") if r.reference else None) for r in results}
    per_task = lossless_check(samples, base.samples(), dtype)
    for task, check in per_task.items():
        if tolerances.get(task) is not None and check["verdict"] == "UNCALIBRATED":
            check = lossless_check([s for s in samples if s["task"] == task], base.samples(), dtype,
                                   tolerances[task])[task]  # fmt: skip
        check["baseline_run"] = base.run_id
        summary["tasks"][task]["lossless"] = check
        if check["verdict"] == "FAIL":
            summary["verdict"] = "FAIL"


def run_config(engine_config, options) -> dict[str, Any]:
    """Everything that affects the samples: the engine configuration and the evaluation options."""
    from dataclasses import asdict

    engine_cfg = asdict(engine_config)
    engine_cfg.pop("events_path", None)
    return {
        "engine": engine_cfg,
        "eval": {
            "tasks": [t.name for t in options.tasks], "data_dir": options.data_dir, "limit": options.limit,
            "num_fewshot": options.num_fewshot, "max_output_len": options.max_output_len,
            "apply_chat_template": options.apply_chat_template, "seed": options.seed,
        },
    }  # fmt: skip


def test_id(engine, options) -> str:
    """A pytest node id in TensorRT-LLM's accuracy-test style, so runs line up with waives.txt entries, e.g.
    accuracy/test_specdec.py::TestSmolLM2_135M::test_eagle3[v2_kv_cache-one_model-tp1]."""
    import re

    from ..evals.runner import model_key_for

    c = engine.config
    name = model_key_for(engine, options.model_key).split("/")[-1]
    cls = "Test" + re.sub(r"[^0-9A-Za-z]+", "_", name.replace("-Instruct", "")).strip("_")
    test = "test_eagle3" if c.spec else "test_auto_dtype"
    params = [f"{c.kv_cache.version}_kv_cache"] + (["one_model"] if c.spec else []) + [f"tp{c.tp_size}"]
    return f"accuracy/test_specdec.py::{cls}::{test}[{'-'.join(params)}]"


SPEC_FLAGS = {"--spec": True, "--draft-len": True, "-k": True, "--draft-model": True, "--spec-guard": True,
              "--inject": True}  # fmt: skip


def strip_flags(args: list[str], flags: dict[str, bool]) -> list[str]:
    """args without the given flags (and their values, for flags that take one)."""
    out, i = [], 0
    while i < len(args):
        name = args[i].split("=", 1)[0]
        if name in flags:
            i += 1 if ("=" in args[i] or not flags[name]) else 2
            continue
        out.append(args[i])
        i += 1
    return out


def baseline_config(config):
    """The non-speculative twin of a spec-dec configuration: same model, KV cache, dtype, batch and seed; no
    draft and no injected faults (the baseline is the clean reference the spec-dec outputs must equal)."""
    from dataclasses import replace

    return replace(config, spec=None, inject=())


@functools.lru_cache(maxsize=1)
def _git_state() -> dict[str, Any]:
    """Read once per process: a commit made while a run is going must not change which baseline it pairs with."""
    from ..results import manifest as mf

    return mf.git_state()


def _run_key(config, options) -> str:
    from ..results import store

    return store.config_key({**run_config(config, options), "commit": _git_state()["commit"]})


def find_baseline(out: str, config, options):
    """The newest finished run of exactly this (non-speculative) configuration at this commit, if any."""
    from ..results import store

    key = _run_key(config, options)
    finished = [r for r in store.list_runs(out) if r.is_finished and r.manifest().get("config_key") == key]
    return finished[-1] if finished else None


def _launch(
    options,
    gpus,
    tp,
    nnodes,
    node_rank,
    rdzv_endpoint,
    rdzv_backend,
    dry_run,
    device,
    model,
    rank_args,
    out,
    config_for,
):
    from ..evals.tasks import source_for
    from ..launch import job
    from ..launch.layout import plan_layout
    from ..launch.torchrun import TorchrunSpec
    from ..workers.checkpoint import load_checkpoint

    resolved = job.resolve_job_device(device, gpus)
    cfg = load_checkpoint(model).config
    layout = plan_layout(gpus * nnodes, cfg.num_attention_heads, cfg.num_key_value_heads, tp)
    if layout.tp > gpus:
        raise UserError(f"TP {layout.tp} would span nodes; use --tp <= --gpus ({gpus})")
    if not dry_run:
        for spec_ in options.tasks:
            source_for(spec_, options.data_dir)  # missing data: one clear error before any rank starts
    args = rank_args(layout.tp, resolved)
    spec = TorchrunSpec(gpus, nnodes, node_rank, rdzv_endpoint, rdzv_backend, args)
    config = config_for(layout.tp, resolved)
    try:
        if config.spec is not None and not dry_run and find_baseline(out, baseline_config(config), options) is None:
            print("lossless gate: running the non-speculative baseline job first", file=sys.stderr)
            base_args = [*strip_flags(args, SPEC_FLAGS), "--spec", "none"]
            job.launch(TorchrunSpec(gpus, nnodes, node_rank, rdzv_endpoint, rdzv_backend, base_args), layout,
                       resolved, dry_run)  # fmt: skip
        return job.launch(spec, layout, resolved, dry_run)
    except job.JobFailed as e:
        print(f"specdec-eval: error: run failed: {e}", file=sys.stderr)
        raise typer.Exit(e.code) from None


def rank_args_from_context(ctx, tp: int, device: str) -> list[str]:
    """The options the user gave (not defaults), as flags for every rank, minus the launcher's own, plus the
    resolved --tp and --device."""
    launcher_only = {"gpus", "tp", "nnodes", "node_rank", "rdzv_endpoint", "rdzv_backend", "dry_run", "device",
                     "json_out"}  # fmt: skip
    args: list[str] = []
    for param in ctx.command.params:
        name = param.name
        source = ctx.get_parameter_source(name)
        if name in launcher_only or source is None or source.name != "COMMANDLINE":
            continue
        flag = max(param.opts, key=len)
        value = ctx.params[name]
        if isinstance(value, bool):
            flags = param.opts if value else param.secondary_opts
            if flags:
                args.append(max(flags, key=len))
        elif isinstance(value, (list, tuple)):
            for v in value:
                args += [flag, str(v)]
        else:
            args += [flag, str(value)]
    return [*args, "--tp", str(tp), "--device", device]


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
            "report": r.report,
            "filter_mismatches": r.filter_mismatches,
        }
    verdicts = [t["verdict"] for t in tasks.values()]
    verdict = "FAIL" if "FAIL" in verdicts or failing else "PASS"
    return {"verdict": verdict, "tasks": tasks, "events": events, "failing_events": len(failing),
            "elapsed_s": round(elapsed_s, 1), "model": engine.config.model,
            "kv_cache": engine.config.kv_cache.version,
            "spec": engine.config.spec.algorithm if engine.config.spec else None,
            "world_size": engine.world.layout.world_size if hasattr(engine, "world") else 1}  # fmt: skip


def print_report(summary: dict[str, Any]) -> None:
    out = sys.stdout
    for name, t in summary["tasks"].items():
        print(f"\n{name}: {t['num_samples']} samples from {t['data']}", file=out)
        print(t["report"], file=out)
        for m in t.get("filter_mismatches", [])[:5]:
            print(f"warning: doc {m['doc_id']} {m['filter']}: our filter gives {m['ours']}, lm-eval's "
                  f"{m['lm_eval']} (lm-eval's is scored)", file=out)  # fmt: skip
        scores = ", ".join(f"{k} {v:.2f}" for k, v in t["filter_scores"].items())
        print(f"filters: {scores}; score = their mean = {t['score']:.2f}", file=out)
        if t.get("lossless"):
            ls = t["lossless"]
            line = f"lossless: {ls['verdict']} ({ls['reason']})"
            if ls.get("num_pairs"):
                line += f"; identical {ls['identical']}/{ls['num_pairs']}, McNemar p {ls['mcnemar_p']:.3g}"
                line += f" vs baseline run {ls['baseline_run']}"
            print(line, file=out)
            for d in ls.get("divergences", [])[:10]:
                print(f"  divergent doc {d['doc_id']}: first differing token at {d['position']}", file=out)
        if t["acceptance"]:
            a = t["acceptance"]
            per_pos = ", ".join(f"{x:.2f}" for x in a["per_position_rate"])
            print(f"acceptance length {a['acceptance_length']:.3f} (incl. bonus token), rate "
                  f"{a['acceptance_rate']:.3f}, per position [{per_pos}]", file=out)  # fmt: skip
    print("", file=out)
    for name, t in summary["tasks"].items():
        ref = "no ref"
        if t["reference"] is not None:
            ref = f"ref {t['reference']:.2f} thr {t['threshold']:.2f} theta {t['theta']:.2f}"
        lossless = f"  lossless {t['lossless']['verdict']}" if t.get("lossless") else ""
        print(f"{name:<20} {t['score']:6.2f}  {ref:<32} {t['verdict']}{lossless}", file=out)
    if summary["events"]:
        print("events: " + ", ".join(f"{k} {v}" for k, v in sorted(summary["events"].items())), file=out)
    print(f"run {summary['verdict']} in {summary['elapsed_s']:.0f} s ({summary['world_size']} rank(s))", file=out)
