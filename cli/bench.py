"""`specdec-eval bench`: our engine vs Hugging Face transformers (and our spec-dec engine) on the same prompts in
interleaved rounds, with this machine's limits measured in the same run; `bench --verdict`: the wall time of whole
GSM8K verdicts, plain vs spec-dec with its lossless baseline. The work is in evals/bench/speed.py and
evals/bench/verdict_timing.py; this module parses and prints (cli/bench_print.py)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from ..evals.bench.prompts import BENCH_PROMPTS
from ..evals.run_types import EvalOptions
from . import options as o
from .progress import generation_progress, stderr

__all__ = ["BENCH_PROMPTS", "bench"]

SPEED = "Speed bench"
VERDICT = "Verdict bench (--verdict)"
# `run`'s own options (evals/run_types.py): a verdict here is a `run`, and --prompts gsm8k reads the same data.
MaxOutputLen, MAX_OUTPUT_LEN = o.option_of(EvalOptions, "max_output_len", group=VERDICT)
DataDir, DATA_DIR = o.option_of(EvalOptions, "data_dir", group=None)


def bench(
    num_prompts: Annotated[
        int, typer.Option("--num-prompts", help="Prompts at the largest batch size.", rich_help_panel=SPEED)
    ] = 16,
    max_new_tokens: Annotated[
        int, typer.Option("--max-new-tokens", "-n", help="Tokens per prompt.", rich_help_panel=SPEED)
    ] = 64,
    batch_sizes: Annotated[
        str,
        typer.Option(
            "--batch-sizes", help="Comma-separated; batch B serves the prompts B at a time.", rich_help_panel=SPEED
        ),
    ] = "1,16",
    batch1_prompts: Annotated[
        int,
        typer.Option(
            "--batch1-prompts", help="Prompts measured one at a time at batch 1 (it is slow).", rich_help_panel=SPEED
        ),
    ] = 2,
    prompts_from: Annotated[
        str,
        typer.Option(
            "--prompts",
            help="builtin (varied self-written prompts) or gsm8k (5-shot GSM8K test "
            "prompts, what the shipped draft head was trained for; needs the data).",
            rich_help_panel=SPEED,
        ),
    ] = "builtin",
    skip_hf: Annotated[
        bool, typer.Option("--skip-hf", help="Do not measure HF transformers.", rich_help_panel=SPEED)
    ] = False,
    verdict: Annotated[
        bool,
        typer.Option(
            "--verdict",
            help="Time whole verdicts instead: plain run, spec-dec + separate baseline, "
            "spec-dec + paired baseline (needs --spec eagle3).",
            rich_help_panel=VERDICT,
        ),
    ] = False,
    docs: Annotated[int, typer.Option("--docs", help="Documents per verdict.", rich_help_panel=VERDICT)] = 64,
    sample_seed: Annotated[
        int, typer.Option("--sample-seed", help="Seed of the random subset of documents.", rich_help_panel=VERDICT)
    ] = 0,
    task: Annotated[
        str,
        typer.Option(
            "--task",
            help="gsm8k, gsm8k_smoke (shipped problems, offline demo), or gsm8k_sampled (T = 0.7; with "
            "--spec-sampling rejection: judged in distribution, the spec+scored side).",
            rich_help_panel=VERDICT,
        ),
    ] = "gsm8k",
    max_output_len: MaxOutputLen = MAX_OUTPUT_LEN,
    rounds: Annotated[
        int, typer.Option("--rounds", help="Rounds; the sides are interleaved in each (A B C A B C ...).")
    ] = 2,
    estimate_only: Annotated[
        bool,
        typer.Option(
            "--estimate-only",
            help="Calibrate each side on one prompt, print the expected duration, and stop.",
            rich_help_panel=SPEED,
        ),
    ] = False,
    data_dir: DataDir = DATA_DIR,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of a table.")] = False,
    model: o.Model = o.E.model,
    kv_cache: o.KVCache = o.K.version,
    dtype: o.DType = o.E.dtype,
    device: o.Device = o.E.device,
    device_memory: o.DeviceMemory = None,
    spec: o.Spec = "none",
    draft_len: o.DraftLen = o.S.max_draft_len,
    draft_model: o.DraftModel = o.S.draft_model,
    spec_sampling: o.SpecSampling = o.S.sampling,
    decode_copy: o.DecodeCopy = o.K.decode_copy,
) -> None:
    """Tokens/s of our engine and of HF transformers `generate` on the same prompts, at each batch size, and their
    ratios (greedy, EOS ignored so every side produces exactly prompts x max-new-tokens). The sides run in rounds,
    interleaved (ours, spec, hf, ours, spec, hf, ...): each ratio is the median of its per-round ratios, shown with
    its min-max; a ratio whose rounds differ by more than 1.3x is printed UNSTABLE (the machine's load moved).
    Before the rounds it calibrates each side on one prompt and prints the expected duration; the defaults
    (batch 1 and 16, 2 rounds) take ~10 min on an idle 2-core CPU with --prompts gsm8k and --spec eagle3. Without
    --device-memory each engine gets what the largest batch of these prompts needs.
    Two rates per side: end to end (prefill included) and decode (tokens after every request of a batch had its
    first token, over the time after that moment, within the same call). Prefix reuse is off on our side, so every
    side prefills every prompt in full. This machine's fp32 GEMM peak and memory bandwidth are measured in the
    same run (before and after the rounds, best of each), and each plain side's prefill GFLOP/s and decode GB/s
    are printed as fractions of them, with the formulas used.
    With --spec eagle3 it also measures our engine with speculative decoding against our plain decoding, with
    the acceptance length. Peak memory: CUDA max allocated per side; on CPU the process's peak RSS after it.

    --verdict: the wall time of a whole verdict (`specdec-eval run`: evaluate, record, gates) on a seeded random
    subset of --docs GSM8K documents for a plain run, a spec-dec run plus its separate baseline, and a spec-dec run
    with paired decoding from one prefill (what `run` does by default); each side into a
    fresh temporary runs folder, interleaved in rounds; the ratios to the plain side, and the plain run's prefill
    and decode as fractions of the hardware limits.

    Examples:
      specdec-eval bench                                        # batch 1 and 16: ours vs HF, 2 rounds
      specdec-eval bench --spec eagle3 --prompts gsm8k --data-dir ../shared/data --json
      specdec-eval bench --batch-sizes 1,32 --num-prompts 32 --rounds 3    # the larger bench (~30 min here)
      specdec-eval bench --spec eagle3 --prompts gsm8k --data-dir ../shared/data --estimate-only
      specdec-eval bench --verdict --spec eagle3 --docs 16 --data-dir ../shared/data
      specdec-eval bench --verdict --spec eagle3 --spec-sampling rejection --task gsm8k_sampled --docs 8 \
          --data-dir ../shared/data                           # the sampled verdict: the run + its scoring
    """
    from ..errors import UserError

    common = dict(
        model=model, kv_cache=kv_cache, dtype=dtype, device=device, device_memory=device_memory, decode_copy=decode_copy
    )
    spec_cfg = dict(spec=spec, draft_len=draft_len, draft_model=draft_model, spec_sampling=spec_sampling)
    if verdict:
        from ..evals.bench.verdict_timing import VerdictBenchPlan, run_verdict_bench
        from .bench_print import print_verdict

        plan = VerdictBenchPlan(
            task=task, docs=docs, seed=sample_seed, data_dir=data_dir, max_output_len=max_output_len, rounds=rounds
        )
        report = run_verdict_bench(
            o.engine_config(**common, **spec_cfg), plan, stderr.print, progress_for=lambda: generation_progress(0)
        )
        if as_json:
            print(json.dumps(report))
        else:
            print_verdict(report)
        return
    from ..evals.bench.speed import BenchPlan, run_bench
    from .bench_print import describe_estimate, print_bench

    try:
        sizes = tuple(sorted({int(b) for b in batch_sizes.split(",")}))
    except ValueError:
        raise UserError(f"--batch-sizes wants integers like 1,32, got {batch_sizes!r}") from None
    plan = BenchPlan(sizes, num_prompts, batch1_prompts, max_new_tokens, prompts_from, data_dir, skip_hf, rounds)
    # HF has no prefix cache; without block_reuse=False our repeated prompts (the warm-up ones) would skip their
    # prefill and the end-to-end rate would compare unlike work.
    engine_opts = dict(common, max_batch_size=max(sizes), block_reuse=False)
    spec_config = o.engine_config(**engine_opts, **spec_cfg) if spec != "none" else None
    result = run_bench(o.engine_config(**engine_opts), spec_config, plan, stderr.print, estimate_only)
    if estimate_only:
        print(json.dumps(result["estimate"]) if as_json else describe_estimate(result["estimate"]))
    elif as_json:
        print(json.dumps(result))
    else:
        print_bench(result)
