"""`specdec-eval selftest`: proof that the harness catches the failures it exists for.

Default: the canary A/B. Side by side, on the same prompts: a fault-free run; the unguarded worker
(`--spec-guard none`) whose max-shape warmup runs out of memory after it saved attention metadata, which must FAIL
with the stale-state signature (a spec_state_leak event naming the fields, failed requests); and the guarded worker
(`--spec-guard template`) under the same OOM, which must PASS with outputs identical to the fault-free run.

`--mutants`: the bug-class matrix: every bug class through the default `run`, and which gate caught it, at which
document, after how long. `--clean`: the clean matrix: an unmutated run on every backend and mode, none of which
may FAIL."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal

import typer

from ..evals.run_types import EvalOptions
from ..option_fields import flag_of, option
from ..workers.kv_cache import KV_CACHE_MANAGERS
from . import options as o
from .bench import BENCH_PROMPTS
from .progress import stderr

MUTANTS = "Bug-class matrix (--mutants)"


@dataclass(frozen=True)
class SelftestOptions:
    """`selftest`'s options. The matrix's evaluation options are `run`'s and the engine options the engine's, taken
    by reference; where the default or the help differs, the canary and the matrix have defaults of their own (a
    matrix run takes a seeded random subset of 10 GSM8K documents where `run` takes every document)."""

    mode: Literal["inject", "budget"] = option(
        "inject",
        "--mode",
        help="inject: an injected OOM in the max-shape warmup; budget: a real one, from a kv v2 byte quota "
        "that leaves less headroom than the Eagle3 draft pass needs.",
    )
    num_prompts: int = option(4, "--num-prompts", min=1, max=len(BENCH_PROMPTS), help="Prompts per run (built in).")
    max_new_tokens: int = option(16, "--max-new-tokens", "-n", min=1, help=None)
    as_json: bool = option(False, "--json", help="Print one JSON object.")
    mutants: bool = option(
        False,
        "--mutants",
        help="Run every bug class through the default `run` and print which gate caught "
        "it (the answer to 'what does this tool catch').",
        group=MUTANTS,
    )
    clean: bool = option(
        False,
        "--clean",
        help="Run the clean matrix: an unmutated `run` on every backend and mode (ours float32 / bfloat16, tiny "
        "/ SmolLM2, greedy / sampled, paired / separate; serve over HTTP; llama.cpp); none may FAIL.",
        group=MUTANTS,
    )
    engine: Literal["ours", "vllm"] = option(
        "ours",
        "--engine",
        help="Whose bugs: ours (planted in our engine) or vllm (planted in a real vLLM server by the test-only "
        "plugin tests/vllm_plugin: a plain and a speculating server are started from the vLLM venv).",
        group=MUTANTS,
    )
    vllm_venv: str | None = option(
        None, "--vllm-venv", help="The vLLM venv (default $VLLM_VENV, else .venv-vllm: make setup-vllm).", group=MUTANTS
    )
    vllm_model_dir: str | None = option(
        None,
        "--vllm-model-dir",
        help="The model folder vLLM serves (default $VLLM_MODEL_DIR, else "
        "VLLM_VENV/smollm2-hf: the embedded SmolLM2 exported).",
        group=MUTANTS,
    )
    only: list[str] | None = option(
        None,
        "--only",
        help="Only this bug class (repeatable, or comma-separated); the unmutated run always runs. With --clean: "
        "the rows whose name contains a given word (e.g. 'ours tiny', serve, llamacpp).",
        group=MUTANTS,
    )
    limit: int | None = flag_of(
        EvalOptions, "limit", default=10, group=MUTANTS, help="GSM8K documents per run (a seeded random subset)."
    )
    data_dir: str | None = flag_of(EvalOptions, "data_dir", group=MUTANTS)
    max_output_len: int | None = flag_of(EvalOptions, "max_output_len", group=MUTANTS)
    num_fewshot: int | None = flag_of(EvalOptions, "num_fewshot", group=MUTANTS)
    no_reference: bool = flag_of(
        EvalOptions,
        "no_reference",
        group=MUTANTS,
        help="No accuracy reference (its gate shows '-'): for models without one, or shots and lengths other than "
        "the reference's. Implied for 'tiny', a random test model.",
    )
    gen_kwargs: str | None = flag_of(
        EvalOptions,
        "gen_kwargs",
        group=MUTANTS,
        help="lm-eval's --gen_kwargs for the sampled classes' runs (gsm8k_sampled, T = 0.7 by default), e.g. "
        "temperature=1.0,top_k=20,top_p=0.9 (spec_filter_order fires only with both filters); the greedy classes' "
        "runs stay greedy.",
    )
    model: str | None = option(
        None,
        "--model",
        "-m",
        help="Canary: default 'tiny'. --mutants: default 'smollm2' (the embedded "
        "default, with its shipped Eagle3 head); 'tiny' proves the same on the lossless and events "
        "gates in seconds.",
        group=o.ENGINE,
    )
    kv_cache: str | None = option(
        None,
        "--kv-cache",
        help="KV-cache manager (canary: v2, whose byte quota budget mode needs; --mutants: run's default, v1).",
        group=o.ENGINE,
        choices=lambda: tuple(KV_CACHE_MANAGERS),
    )
    draft_len: int = flag_of(o.EngineOptions, "draft_len")
    device: str = flag_of(o.EngineOptions, "device")
    device_memory: str | None = flag_of(o.EngineOptions, "device_memory")
    max_num_tokens: int | None = flag_of(
        o.EngineOptions,
        "max_num_tokens",
        default=None,
        help="Tokens one forward may carry (canary: 256; --mutants: the engine's default).",
    )


@o.dataclass_options(opts=SelftestOptions)
def selftest(*, opts: SelftestOptions) -> None:
    """Run the canary A/B; exit 0 when the unguarded half fails as it should and the guarded half passes. With
    --mutants, run the bug-class matrix; exit 0 when every class is caught by its gate and the unmutated engine
    passes every gate. With --clean, the clean matrix; exit 0 when no unmutated run FAILs.

    Examples:
      specdec-eval selftest
      specdec-eval selftest --mode budget --json
      specdec-eval selftest --model smollm2 --device-memory 2GiB
      specdec-eval selftest --mutants --data-dir ../shared/data --limit 10
      specdec-eval selftest --clean --data-dir ../shared/data --limit 4 --max-output-len 16 --only "ours tiny",serve
      specdec-eval selftest --mutants --model tiny --only accept_off_by_one,sample_key_shift --json
      specdec-eval selftest --mutants --only spec_filter_order --gen-kwargs temperature=1.0,top_k=20,top_p=0.9
      specdec-eval selftest --mutants --engine vllm --data-dir DATA --limit 6 --max-output-len 64 --no-reference
    """
    if opts.clean:
        _clean(opts)
        return
    if opts.mutants and opts.engine == "vllm":
        _vllm_mutants(opts, _matrix_options(opts, opts.no_reference))
        return
    if opts.mutants:
        model = opts.model or "smollm2"
        kv_cache = opts.kv_cache or o.K.version  # the run's default
        _mutants(opts, model, kv_cache, _matrix_options(opts, opts.no_reference or model == "tiny"))
        return
    from ..evals.selftest.canary import run_canary

    model, kv_cache = opts.model or "tiny", opts.kv_cache or "v2"
    base = o.engine_config(
        model=model,
        kv_cache=kv_cache,
        device=opts.device,
        device_memory=opts.device_memory or "256MiB",
        max_num_tokens=opts.max_num_tokens or 256,
        spec="eagle3",
        draft_len=opts.draft_len,
    )
    stderr.print(f"selftest: canary A/B on {model}, kv {kv_cache}, K={opts.draft_len}, mode {opts.mode} ...")
    report = run_canary(base, BENCH_PROMPTS[: opts.num_prompts], opts.max_new_tokens, opts.mode)
    if opts.as_json:
        print(json.dumps(report, indent=2))
    else:
        _print_table(report)
    if not report["ok"]:
        raise typer.Exit(1)


def _matrix_options(opts: SelftestOptions, no_reference: bool, gen_kwargs: bool = True) -> EvalOptions:
    """The evaluation options of each matrix run, its task data checked now."""
    from ..evals.pipeline.preflight import check_task_data
    from ..evals.tasks.registry import TASKS

    options = EvalOptions(
        tasks=[TASKS["gsm8k"]],
        data_dir=opts.data_dir,
        limit=opts.limit,
        max_output_len=opts.max_output_len,
        num_fewshot=opts.num_fewshot,
        no_reference=no_reference,
        gen_kwargs=opts.gen_kwargs if gen_kwargs else None,
    )
    check_task_data(options)
    return options


def _mutants(opts: SelftestOptions, model: str, kv_cache: str, options: EvalOptions) -> None:
    from ..evals.selftest.mutants import run_matrix, select_classes
    from .mutants_print import print_matrix

    classes = select_classes(opts.only)
    # 2 GiB holds ten paired GSM8K documents of SmolLM2 in its KV pool, and keeps the run's engines (spec-dec, plain
    # baseline or audit) within this shared machine's memory; it shapes no output.
    config = o.engine_config(
        model=model,
        kv_cache=kv_cache,
        device=opts.device,
        device_memory=opts.device_memory or "2GiB",
        spec="eagle3",
        draft_len=opts.draft_len,
        max_num_tokens=opts.max_num_tokens or o.E.max_num_tokens,
    )
    stderr.print(
        f"selftest --mutants: {len(classes)} runs of `run` on {model} (kv {kv_cache}, K={opts.draft_len}), "
        f"{options.limit} GSM8K documents each ..."
    )
    report = run_matrix(config, options, classes, note=lambda line: stderr.print(f"mutants {line}"))
    _report(report, opts.as_json, print_matrix)


def _clean(opts: SelftestOptions) -> None:
    from ..evals.selftest.clean import run_clean, select_rows
    from .mutants_print import print_clean

    rows = select_rows(opts.only)
    _matrix_options(opts, True, gen_kwargs=False)  # the task data is there
    shared = ["--tasks", "gsm8k", "--limit", str(opts.limit), "--sample", "random", "--no-reference"]
    shared += ["--data-dir", opts.data_dir] if opts.data_dir else []
    shared += ["--max-output-len", str(opts.max_output_len)] if opts.max_output_len else []
    shared += ["--num-fewshot", str(opts.num_fewshot)] if opts.num_fewshot is not None else []
    stderr.print(f"selftest --clean: {len(rows)} unmutated runs of `run`, {opts.limit} GSM8K documents each ...")
    report = run_clean(rows, shared, note=lambda line: stderr.print(f"clean {line}"))
    _report(report, opts.as_json, print_clean)


def _vllm_mutants(opts: SelftestOptions, options: EvalOptions) -> None:
    from ..evals.selftest.vllm_mutants import default_setup, run_vllm_matrix, select_vllm_classes
    from ..workers.spec.eagle3_head import SHIPPED_HEADS

    setup = default_setup(opts.vllm_venv, opts.vllm_model_dir, str(SHIPPED_HEADS["smollm2"]), opts.draft_len)
    classes = select_vllm_classes(opts.only)
    # what the servers run, declared: the run picks its reference and its exactness (float32: token identity) from it
    config = o.engine_config(model="smollm2", spec="eagle3", draft_len=opts.draft_len, dtype="float32")
    stderr.print(
        f"selftest --mutants --engine vllm: {len(classes)} runs of `run --endpoint` against vLLM, "
        f"{options.limit} GSM8K documents each ..."
    )
    report = run_vllm_matrix(setup, config, options, classes, note=lambda line: stderr.print(f"mutants {line}"))
    _report(report, opts.as_json, _print_vllm_matrix)


def _print_vllm_matrix(report: dict) -> None:
    from .mutants_print import print_matrix

    print_matrix(report)
    print("vLLM servers ready after: " + ", ".join(f"{k} {v:.0f} s" for k, v in report["startup_s"].items()))
    populated = report["rows"][0].get("acceptance_reference") or {}
    if populated.get("refused"):
        print(f"acceptance reference NOT written by the unmutated run: {populated['refused']}")
    elif populated.get("ref_al") is not None:
        print(
            f"acceptance reference from the unmutated run: AL {populated['ref_al']} over "
            f"{populated.get('num_documents')} documents, {populated.get('num_cycles')} draft cycles"
        )


def _report(report: dict, as_json: bool, printer) -> None:
    """A matrix's report as JSON or as its table; exit status 1 unless every row came out as it must."""
    if as_json:
        print(json.dumps(report, indent=2))
    else:
        printer(report)
    if not report["ok"]:
        raise typer.Exit(1)


def _print_table(report: dict) -> None:
    runs = report["runs"]
    names = list(runs)
    rows = [
        ("spec guard", lambda r: r["guard"]),
        ("warmup_oom events", lambda r: r["events"].get("warmup_oom", 0)),
        ("spec_state_restored", lambda r: r["events"].get("spec_state_restored", 0)),
        ("spec_state_leak", lambda r: r["events"].get("spec_state_leak", 0)),
        ("leaked fields", lambda r: ", ".join(r["leaked_fields"]) or "-"),
        ("failed requests", lambda r: f"{r['failed']}/{r['requests']}"),
        ("identical to fault-free", lambda r: f"{r['identical']}/{r['requests']}"),
        ("expected", lambda r: r["expected"]),
        ("verdict", lambda r: r["verdict"]),
    ]
    width = max(len(n) for n in names) + 2
    print(f"{'':<26}" + "".join(f"{n:<{max(width, 34)}}" for n in names))
    for label, get in rows:
        print(f"{label:<26}" + "".join(f"{str(get(runs[n])):<{max(width, 34)}}" for n in names))
    if report.get("budget"):
        b = report["budget"]
        print(
            f"\nbudget mode: v2 quota {b['quota_bytes']:,} B leaves {b['headroom_bytes']:,} B of headroom; the draft "
            f"pass needs {b['draft_need_bytes']:,} B (target forward {b['target_need_bytes']:,} B)"
        )
    print(f"\nselftest {'PASSED' if report['ok'] else 'FAILED'}: {report['summary']}")
