"""`specdec-eval bench`: our engine vs Hugging Face transformers (and our spec-dec engine) on the same prompts in
interleaved rounds, with this machine's limits measured in the same run; `bench --verdict`: the wall time of whole
GSM8K verdicts, plain vs spec-dec with its lossless baseline. The work is in the evals' bench package; this module
parses and prints."""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..evals.bench.prompts import BENCH_PROMPTS
from ..evals.run_types import EvalOptions
from ..option_fields import flag_of, option
from ..peers.client.options import EndpointOptions
from . import options as o
from .progress import generation_progress, stderr

__all__ = ["BENCH_PROMPTS", "bench"]

SPEED = "Speed bench"
VERDICT = "Verdict bench (--verdict)"


@dataclass(frozen=True)
class BenchOptions:
    """`bench`'s options. `run`'s own and the engine's are taken by reference: a verdict here is a `run`, and
    --prompts gsm8k reads the same data."""

    num_prompts: int = option(16, "--num-prompts", help="Prompts at the largest batch size.", group=SPEED)
    max_new_tokens: int = option(64, "--max-new-tokens", "-n", help="Tokens per prompt.", group=SPEED)
    batch_sizes: str = option(
        "1,16", "--batch-sizes", help="Comma-separated; batch B serves the prompts B at a time.", group=SPEED
    )
    batch1_prompts: int = option(
        2, "--batch1-prompts", help="Prompts measured one at a time at batch 1 (it is slow).", group=SPEED
    )
    prompts_from: str = option(
        "builtin",
        "--prompts",
        help="builtin (varied self-written prompts) or gsm8k (5-shot GSM8K test "
        "prompts, what the shipped draft head was trained for; needs the data).",
        group=SPEED,
    )
    skip_hf: bool = option(False, "--skip-hf", help="Do not measure HF transformers.", group=SPEED)
    skip_vllm: bool = option(
        False,
        "--skip-vllm",
        help="Do not measure vLLM's CPU build (measured when `make setup-vllm` set it up: a plain server, "
        "float32, the same prompts at the same concurrency).",
        group=SPEED,
    )
    profile: bool = option(
        False,
        "--profile",
        help="Profile our plain engine instead: --num-prompts prompts at once, -n tokens each, with prefix reuse "
        "(as `run` serves them); where each step's time goes, prefill and decode apart.",
        group=SPEED,
    )
    verdict: bool = option(
        False,
        "--verdict",
        help="Time whole verdicts instead: plain run, spec-dec + separate baseline, "
        "spec-dec + paired baseline (needs --spec eagle3).",
        group=VERDICT,
    )
    docs: int = option(64, "--docs", help="Documents per verdict.", group=VERDICT)
    endpoint: str | None = option(
        None,
        "--endpoint",
        help="Time verdicts against servers instead: URL speculates (declare it with --spec), --baseline-endpoint "
        "serves the same model plainly; a plain run, the speculating run with its baseline server, and the same "
        "documents sampled (T = 0.7: a plain run, and the speculating run with its scoring).",
        group=VERDICT,
    )
    baseline_endpoint: str | None = flag_of(EndpointOptions, "baseline_endpoint", group=VERDICT)
    serve_cmd: str | None = flag_of(EndpointOptions, "serve_cmd", group=VERDICT)
    baseline_serve_cmd: str | None = flag_of(EndpointOptions, "baseline_serve_cmd", group=VERDICT)
    sample_seed: int = option(0, "--sample-seed", help="Seed of the random subset of documents.", group=VERDICT)
    task: str = option(
        "gsm8k",
        "--task",
        help="gsm8k, gsm8k_smoke (shipped problems, offline demo), or gsm8k_sampled (T = 0.7; with "
        "--spec-sampling rejection: judged in distribution, the spec+scored side).",
        group=VERDICT,
    )
    max_output_len: int | None = flag_of(EvalOptions, "max_output_len", group=VERDICT)
    rounds: int = option(2, "--rounds", help="Rounds; the sides are interleaved in each (A B C A B C ...).")
    estimate_only: bool = option(
        False,
        "--estimate-only",
        help="Calibrate each side on one prompt, print the expected duration, and stop.",
        group=SPEED,
    )
    data_dir: str | None = flag_of(EvalOptions, "data_dir", group=None)
    as_json: bool = option(False, "--json", help="Print one JSON object instead of a table.")
    model: str = flag_of(o.EngineOptions, "model")
    kv_cache: str = flag_of(o.EngineOptions, "kv_cache")
    dtype: str = flag_of(o.EngineOptions, "dtype")
    device: str = flag_of(o.EngineOptions, "device")
    device_memory: str | None = flag_of(o.EngineOptions, "device_memory")
    spec: str = flag_of(o.EngineOptions, "spec")
    draft_len: int = flag_of(o.EngineOptions, "draft_len")
    draft_model: str = flag_of(o.EngineOptions, "draft_model")
    spec_sampling: str = flag_of(o.EngineOptions, "spec_sampling")
    decode_copy: bool | None = flag_of(o.EngineOptions, "decode_copy")


@o.dataclass_options(opts=BenchOptions)
def bench(*, opts: BenchOptions) -> None:
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
      specdec-eval bench --verdict --spec eagle3 --endpoint URL --baseline-endpoint URL0 --docs 8 \
          --data-dir ../shared/data                           # against servers (URL speculates, URL0 does not)
      specdec-eval bench --profile --prompts gsm8k --data-dir ../shared/data   # where our engine's time goes
      specdec-eval bench --verdict --spec eagle3 --spec-sampling rejection --task gsm8k_sampled --docs 8 \
          --data-dir ../shared/data                           # the sampled verdict: the run + its scoring
    """
    from ..errors import UserError

    common = {name: getattr(opts, name) for name in ("model", "kv_cache", "dtype", "device", "device_memory")}
    common["decode_copy"] = opts.decode_copy
    spec_cfg = {name: getattr(opts, name) for name in ("spec", "draft_len", "draft_model", "spec_sampling")}
    if opts.profile:
        from ..evals.bench.profile import describe_profile, run_profile

        config = o.engine_config(**common, max_batch_size=opts.num_prompts)
        result = run_profile(
            config, opts.prompts_from, opts.num_prompts, opts.max_new_tokens, opts.data_dir, stderr.print
        )
        print(json.dumps(result) if opts.as_json else "\n".join(describe_profile(result)))
        return
    if opts.verdict:
        from ..evals.bench.verdict_timing import VerdictBenchPlan, run_verdict_bench
        from .bench_print import print_verdict

        plan = VerdictBenchPlan(
            task=opts.task,
            docs=opts.docs,
            seed=opts.sample_seed,
            data_dir=opts.data_dir,
            max_output_len=opts.max_output_len,
            rounds=opts.rounds,
        )
        if opts.endpoint:
            from ..evals.bench.endpoint_verdict import run_endpoint_verdict_bench
            from .bench_print import print_endpoint_verdict

            endpoint = EndpointOptions(
                endpoint=opts.endpoint,
                baseline_endpoint=opts.baseline_endpoint,
                serve_cmd=opts.serve_cmd,
                baseline_serve_cmd=opts.baseline_serve_cmd,
            )
            report = run_endpoint_verdict_bench(
                o.engine_config(**common, **spec_cfg),
                endpoint,
                plan,
                stderr.print,
                progress_for=lambda: generation_progress(0),
            )
            print(json.dumps(report) if opts.as_json else "\n".join(print_endpoint_verdict(report)))
            return
        report = run_verdict_bench(
            o.engine_config(**common, **spec_cfg), plan, stderr.print, progress_for=lambda: generation_progress(0)
        )
        if opts.as_json:
            print(json.dumps(report))
        else:
            print_verdict(report)
        return
    from ..evals.bench.speed import BenchPlan, run_bench
    from .bench_print import describe_estimate, print_bench

    try:
        sizes = tuple(sorted({int(b) for b in opts.batch_sizes.split(",")}))
    except ValueError:
        raise UserError(f"--batch-sizes wants integers like 1,32, got {opts.batch_sizes!r}") from None
    plan = BenchPlan(
        sizes,
        opts.num_prompts,
        opts.batch1_prompts,
        opts.max_new_tokens,
        opts.prompts_from,
        opts.data_dir,
        opts.skip_hf,
        opts.rounds,
        vllm=(no_vllm := _why_no_vllm(opts)) is None,
    )
    if no_vllm not in (None, "skipped") and opts.model == "smollm2":
        stderr.print(f"bench: no vLLM side: {no_vllm}")
    # HF has no prefix cache; without block_reuse=False our repeated prompts (the warm-up ones) would skip their
    # prefill and the end-to-end rate would compare unlike work.
    engine_opts = dict(common, max_batch_size=max(sizes), block_reuse=False)
    spec_config = o.engine_config(**engine_opts, **spec_cfg) if opts.spec != "none" else None
    result = run_bench(o.engine_config(**engine_opts), spec_config, plan, stderr.print, opts.estimate_only)
    if opts.estimate_only:
        print(json.dumps(result["estimate"]) if opts.as_json else describe_estimate(result["estimate"]))
    elif opts.as_json:
        print(json.dumps(result))
    else:
        print_bench(result)


def _why_no_vllm(opts: BenchOptions) -> str | None:
    """Why the speed bench has no vLLM side (None: it has one): skipped, not set up here, or not the same work
    (the exported SmolLM2, float32 on CPU)."""
    from ..evals.bench.vllm_side import vllm_missing

    if opts.skip_vllm or opts.estimate_only:
        return "skipped"
    why = vllm_missing(opts.model)
    if why is None and (opts.dtype not in ("auto", "float32") or opts.device == "cuda"):
        why = "the vLLM side serves float32 on CPU"
    return why
