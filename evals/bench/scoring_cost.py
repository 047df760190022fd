"""What a sampled lossless verdict costs beside a plain run: `python -m specdec_eval.evals.bench.scoring_cost`.

At temperature > 0 the baseline decodes nothing: it scores the spec-dec run's outputs by teacher forcing (one
prefill-shaped pass each). This times, in one process and in interleaved rounds, on the
same documents (5-shot GSM8K prompts): the plain run (the baseline engine decoding them), the spec-dec run
(`--spec-sampling rejection`, logprobs on, as the gate wants them), and the scoring pass of the spec-dec outputs by the
baseline engine; then the gate itself. It prints each side's median and the ratios that matter: scoring / plain run,
and (spec-dec run + scoring) / plain run, the sampled verdict against the plain run (its budget: within 1.4x).
Also the largest difference between the logprobs the spec-dec engine reported and the baseline's scoring (float32:
the noise the target-fidelity tolerance must allow)."""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from ...workers.config import EngineConfig, KVCacheConfig, SamplingParams, SpecConfig, parse_bytes


def _engines(model: str, memory: str, spec_sampling: str):
    from ...workers.engine.engine import Engine
    from ...workers.loading.checkpoint import load_checkpoint

    checkpoint = load_checkpoint(model)
    tokenizer = checkpoint.load_tokenizer()
    common = {"model": model, "device_memory": parse_bytes(memory), "kv_cache": KVCacheConfig(enable_block_reuse=False)}
    plain = Engine.build(EngineConfig(**common), checkpoint=checkpoint, tokenizer=tokenizer)
    spec = Engine.build(
        EngineConfig(**common, spec=SpecConfig(sampling=spec_sampling)), checkpoint=checkpoint, tokenizer=tokenizer
    )
    return plain, spec


def measure(args) -> dict:
    from ..bench.prompts import bench_prompts
    from ..lossless.sampled import judge_outputs, score_requests

    prompts = bench_prompts("gsm8k", args.docs, args.data_dir)
    plain, spec = _engines(args.model, args.device_memory, args.spec_sampling)
    params = [
        SamplingParams(
            max_new_tokens=args.tokens,
            temperature=args.temperature,
            top_p=args.top_p,
            top_k=args.top_k,
            seed=1000 + i,
            logprobs=0,
        )
        for i in range(len(prompts))
    ]
    times: dict[str, list[float]] = {"plain run": [], "spec-dec run": [], "scoring": [], "gate": []}
    tokens = {}
    for r in range(args.rounds):
        start = time.perf_counter()
        plain_out = plain.generate(prompts, params)
        times["plain run"].append(time.perf_counter() - start)
        start = time.perf_counter()
        spec_out = spec.generate(prompts, params)
        times["spec-dec run"].append(time.perf_counter() - start)
        start = time.perf_counter()
        scored = plain.score_outputs(score_requests(spec_out, params))
        times["scoring"].append(time.perf_counter() - start)
        start = time.perf_counter()
        verdict = judge_outputs(spec_out, params, list(range(len(prompts))), _Scored(plain, scored))
        times["gate"].append(time.perf_counter() - start)
        tokens = {"plain": sum(len(o.token_ids) for o in plain_out), "spec": sum(len(o.token_ids) for o in spec_out)}
        print(
            f"round {r + 1}/{args.rounds}: "
            + ", ".join(f"{k} {v[-1]:.1f} s" for k, v in times.items())
            + f"; {verdict.verdict}",
            file=sys.stderr,
            flush=True,
        )
    median = {k: statistics.median(v) for k, v in times.items()}
    diff = max(
        (
            abs(rec[0] - lp)
            for o, s in zip(spec_out, scored, strict=True)
            for rec, lp in zip(o.logprobs or [], s.logprobs, strict=False)
        ),
        default=0.0,
    )
    return {
        "median_s": median,
        "rounds": times,
        "tokens": tokens,
        "verdict": verdict.verdict,
        "basis": verdict.reason,
        "max_logprob_diff": diff,
        "scoring_over_plain": median["scoring"] / median["plain run"],
        "verdict_over_plain": (median["spec-dec run"] + median["scoring"] + median["gate"]) / median["plain run"],
        "acceptance": spec.last_stats.acceptance,
    }


class _Scored:
    """The baseline engine with the scoring already done (the gate is timed apart from the scoring pass)."""

    def __init__(self, engine, scored) -> None:
        self.tokenizer, self._scored = engine.tokenizer, scored

    def score_outputs(self, requests):
        return self._scored


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m specdec_eval.evals.bench.scoring_cost",
        description="The sampled lossless verdict's cost (spec-dec run + the baseline's scoring pass) beside a plain "
        "run of the same documents.",
        epilog="Example: python -m specdec_eval.evals.bench.scoring_cost --docs 8 --data-dir ../shared/data",
    )
    parser.add_argument("--docs", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--device-memory", default="2GiB")
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--top-k", type=int, default=0)
    parser.add_argument("--spec-sampling", default="rejection", choices=("rejection", "rejection-q"))
    args = parser.parse_args(argv)
    result = measure(args)
    m = result["median_s"]
    print(
        f"{args.docs} GSM8K documents x up to {args.tokens} tokens, T={args.temperature} top_p={args.top_p} "
        f"top_k={args.top_k}, {args.model}, {args.rounds} rounds (medians):"
    )
    for name, seconds in m.items():
        print(f"  {name:13s} {seconds:7.2f} s")
    print(
        f"  scoring / plain run: {result['scoring_over_plain']:.2f}x; sampled verdict (spec-dec run + scoring + "
        f"gate) / plain run: {result['verdict_over_plain']:.2f}x"
    )
    print(
        f"  tokens: plain {result['tokens']['plain']}, spec-dec {result['tokens']['spec']}; acceptance length "
        f"{result['acceptance']['acceptance_length']:.2f}"
    )
    print(f"  largest |reported - scored| logprob: {result['max_logprob_diff']:.2e} nats")
    print(f"  verdict: {result['verdict']}: {result['basis']}")


if __name__ == "__main__":
    main()
