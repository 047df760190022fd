"""The sampled lossless gate's seeded simulation: `python -m specdec_eval.studies.lossless_sampled MODE`.

  null     false-FAIL rate on seeded clean runs (default 500) at each run size asked (10 documents x 256 tokens):
           synthetic distributions (per position, logits = s * N(0, 1) over a 512-token vocabulary, s log-uniform
           in [0.5, 8], so positions range from near-uniform to one token holding nearly all the mass), tokens drawn
           from the plain sampler's distribution, judged exactly (the whole distribution known) and conservatively
           (only the top 20 raw logprobs known, as from an endpoint), under two sampling configurations.
  power    the FAIL rate of each sampled bug class at the default run's size, on real distributions: a bank of the
           verify steps of a SmolLM2 + Eagle3 run over 10 five-shot GSM8K prompts x 256 tokens (verify_bank, which says
           how it models a run), replayed through the real rejection sampler with each planted rule.
  smooth   the smooth test's chi-square p-value on exact null draws (u i.i.d. U(0, 1)) at given run sizes: how
           often it falls below each level (the gate's false-FAIL rate rests on it).
  sampler  the chi-square goodness of fit of the rejection sampler on hand-made distributions (rejection_sampler_fit),
           correct and with each planted rule.

Every figure is printed with the command's own parameters; `--json` writes them too."""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch
from scipy.stats import beta, kstest

from ..evals.lossless.sampled import ALPHA, SampledSample, judge_sampled
from ..workers.config import SamplingParams
from ..workers.engine.teacher_forcing import view_of_probs
from ..workers.faults import REJECTION_POINTS
from ..workers.interface import ScoredOutput
from ..workers.planted.rejection import CORRECT, RejectionRule, can_change, planted_rule
from ..workers.sampling.keyed import target_probs

TOP_LOGPROBS = 20
CONFIGS = {
    "T=1.0": SamplingParams(temperature=1.0),  # the seed's GPQA configuration (top_p 1.0)
    "T=0.7 top-k 20 top-p 0.9": SamplingParams(temperature=0.7, top_k=20, top_p=0.9),
}


@dataclass(frozen=True)
class Rate:
    fails: int
    runs: int
    p_values: tuple[float, ...] = ()  # each run's PIT p-value (the null: their calibration)
    within_fails: int = 0  # of the runs, those the within-request test failed
    by_test: dict | None = None  # test -> the runs it failed (at its Bonferroni level)

    @property
    def value(self) -> float:
        return self.fails / self.runs if self.runs else 0.0

    def interval(self, level: float = 0.95) -> tuple[float, float]:
        """Clopper-Pearson interval of the rate."""
        a = (1 - level) / 2
        lo = 0.0 if self.fails == 0 else float(beta.ppf(a, self.fails, self.runs - self.fails + 1))
        hi = 1.0 if self.fails == self.runs else float(beta.ppf(1 - a, self.fails + 1, self.runs - self.fails))
        return lo, hi

    def __str__(self) -> str:
        lo, hi = self.interval()
        return f"{self.fails}/{self.runs} = {self.value:.3f} (95% CI {lo:.3f}-{hi:.3f})"


# --- the null: synthetic clean runs ---------------------------------------------------------------------------------


def synthetic_run(
    rng: torch.Generator, docs: int, tokens: int, vocab: int, params: SamplingParams
) -> tuple[list[SampledSample], list[SampledSample]]:
    """One clean run: per position a synthetic distribution, the token drawn from the plain sampler's distribution;
    the run scored exactly, and by the top raw logprobs only (the same draws)."""
    exact, top = [], []
    scale = torch.exp(torch.empty(docs * tokens, 1).uniform_(math.log(0.5), math.log(8.0), generator=rng))
    logits = torch.randn(docs * tokens, vocab, generator=rng) * scale
    probs = target_probs(logits, params)
    drawn = torch.multinomial(probs, 1, generator=rng).squeeze(-1).tolist()
    views = view_of_probs(probs, drawn)
    logp = torch.log_softmax(logits, -1)
    own = logp.gather(-1, torch.tensor(drawn).unsqueeze(-1)).squeeze(-1).tolist()
    values, ids = torch.topk(logp, TOP_LOGPROBS, dim=-1)
    alts = [
        [[i, v] for i, v in zip(r_i, r_v, strict=True)] for r_i, r_v in zip(ids.tolist(), values.tolist(), strict=True)
    ]
    for doc in range(docs):
        span = slice(doc * tokens, (doc + 1) * tokens)
        scored = ScoredOutput([0.0] * tokens, [[] for _ in range(tokens)], views[span])
        exact.append(SampledSample(doc, drawn[span], params, scored))
        top.append(SampledSample(doc, drawn[span], params, ScoredOutput(own[span], alts[span])))
    return exact, top


def null_rates(
    runs: int,
    docs: int,
    tokens: int,
    vocab: int,
    params: SamplingParams,
    seed: int = 0,
    alpha: float = ALPHA,
    progress: Callable[[int], None] = lambda i: None,
    first: int = 0,
) -> dict[str, Rate]:
    """FAILs over `runs` seeded clean runs (numbered from `first`: several commands cover one long study), judged
    exactly and from the top logprobs; each Rate also keeps the runs' PIT p-values (their whole distribution must be
    U(0, 1), not only its 1 % tail) and, per test, how many runs it failed at its Bonferroni level."""
    fails = {"exact": 0, "top": 0}
    by_test: dict[str, dict[str, int]] = {"exact": {}, "top": {}}
    p_values: dict[str, list[float]] = {"exact": [], "top": []}
    for r in range(first, first + runs):
        rng = torch.Generator().manual_seed(seed * 1_000_003 + r)
        for basis, samples in zip(("exact", "top"), synthetic_run(rng, docs, tokens, vocab, params), strict=True):
            result = judge_sampled(samples, vocab, alpha=alpha, seed=r)
            fails[basis] += result.failed
            for test in failed_tests(result.numbers):
                by_test[basis][test] = by_test[basis].get(test, 0) + 1
            p_values[basis].append(result.numbers["pit"]["p"])
        progress(r + 1 - first)
    return {
        basis: Rate(n, runs, tuple(p_values[basis]), by_test[basis].get("within_requests", 0), by_test[basis])
        for basis, n in fails.items()
    }


def failed_tests(numbers: dict) -> list[str]:
    """The tests a verdict's numbers fail at its level (each by its own Bonferroni share), and `support` for a
    token outside the sampling support."""
    level = numbers["level"]
    tests = {
        "pit": numbers["pit"]["p"],
        "likelihood": numbers["likelihood"]["p"],
        "within_requests": numbers["within_requests"]["p"],
        "within_requests_weighted": numbers["within_requests_weighted"]["p"],
        "tail": (numbers.get("tail_test") or {}).get("p", 1.0),
    }
    draws = numbers.get("rejection_draws")
    if draws:
        tests.update(residual=draws["residual_p"], accepts=draws["accept_p"], accepts_within=draws["accepts_within_p"])
    out = [name for name, p in tests.items() if p < level]
    if numbers["num_violations"]:
        out.append("support")
    return out


# --- power: the bank of real verify steps ---------------------------------------------------------------------------


def class_rule(name: str) -> RejectionRule:
    return CORRECT if name == "unmutated" else planted_rule([name])


def power_rates(
    steps,
    params: SamplingParams,
    classes: Sequence[str],
    replicates: int,
    vocab: int,
    seed: int = 0,
    alpha: float = ALPHA,
    progress: Callable[[str, int], None] = lambda c, i: None,
    blind: bool = True,
) -> dict[str, dict]:
    """Per class: FAILs over `replicates` replays of the bank, and what caught them (`within_only`: FAILs the
    within-request test alone would give, every other test passing). Each replay is judged twice: with the drafts
    known (our engine: the direct tests of the accept decisions and of the draws after a rejection) and from the
    outputs alone (an endpoint's view, `outputs_only`; not with `blind` False)."""
    from .verify_bank import _Views, replay

    views = _Views(steps, params)
    out = {}
    for name in classes:
        fails, by_support, p_values, z_values, within_p, within_only, positions = 0, 0, [], [], [], 0, 0
        outputs_only, direct = 0, 0
        for r in range(replicates):
            samples = replay(steps, params, class_rule(name), seed * 1_000_003 + r, views)
            result = judge_sampled(samples, vocab, alpha=alpha, seed=r)
            if blind:
                outputs_only += judge_sampled(
                    [replace(s, drafts=None) for s in samples], vocab, alpha=alpha, seed=r
                ).failed
            direct += result.failed and _direct_tests_fail(result.numbers)
            fails += result.failed
            by_support += result.numbers["num_violations"] > 0
            p_values.append(result.numbers["pit"]["p"])
            z_values.append(result.numbers["likelihood"]["z"])
            within_p.append(result.numbers["within_requests"]["p"])
            within_only += result.failed and not _fails_without_within(result.numbers)
            positions = result.numbers["positions"]
            progress(name, r + 1)
        out[name] = {
            "rate": Rate(fails, replicates),
            "support_violations_in": by_support,
            "median_pit_p": float(np.median(p_values)),
            "median_likelihood_z": float(np.median(z_values)),
            "median_within_p": float(np.median(within_p)),
            "within_only": within_only,
            "positions": positions,
            "outputs_only": Rate(outputs_only, replicates),
            "direct": direct,
        }
    return out


def _direct_tests_fail(numbers: dict) -> bool:
    """Whether the direct tests of the rejection sampler's draws (drafts known) FAIL a verdict on their own."""
    draws = numbers.get("rejection_draws")
    if not draws:
        return False
    level = numbers["level"]
    return (
        draws["outside_residual"] > 0 or min(draws["residual_p"], draws["accept_p"], draws["accepts_within_p"]) < level
    )


def _fails_without_within(numbers: dict) -> bool:
    """Whether a verdict FAILs on anything but the within-request test: a support violation, a reported logprob off
    the scoring, or a distribution test below the level."""
    level = numbers["level"]
    tests = [numbers["pit"]["p"], numbers["likelihood"]["p"], (numbers.get("tail_test") or {}).get("p", 1.0)]
    tests.append(numbers["within_requests_weighted"]["p"])
    if _direct_tests_fail(numbers):
        return True
    return numbers["num_violations"] > 0 or (numbers.get("target") or {}).get("num_beyond", 0) > 0 or min(tests) < level


# --- the command ----------------------------------------------------------------------------------------------------


def _progress(label: str, total: int) -> Callable[[int], None]:
    start = time.perf_counter()

    def show(done: int) -> None:
        if done == total or done % max(1, total // 10) == 0:
            print(f"  {label}: {done}/{total} ({time.perf_counter() - start:.0f} s)", file=sys.stderr, flush=True)

    return show


def _null(args) -> dict:
    """Per run size and configuration: the gate's false-FAIL rate with its Clopper-Pearson interval, pooled over
    both bases (exact, top logprobs) and each basis alone, and which tests failed."""
    figures = {}
    print(
        f"null: runs {args.first}..{args.first + args.runs - 1} (seed {args.seed}), {args.tokens} tokens a document, "
        f"vocabulary {args.vocab}, alpha {args.alpha}; per size: both configurations x both bases"
    )
    for docs in args.docs:
        fails, judged, by_test = 0, 0, {}
        for config, params in CONFIGS.items():
            if args.config and config != args.config:
                continue
            rates = null_rates(
                args.runs,
                docs,
                args.tokens,
                args.vocab,
                params,
                args.seed,
                args.alpha,
                _progress(f"{docs} documents, {config}", args.runs),
                args.first,
            )
            for basis, rate in rates.items():
                label = f"{config}, {'exact' if basis == 'exact' else f'top-{TOP_LOGPROBS} logprobs'}"
                calibration = float(kstest(rate.p_values, "uniform").pvalue)
                tests = ", ".join(f"{t} {n}" for t, n in sorted((rate.by_test or {}).items())) or "none"
                print(
                    f"  {docs:4d} documents  {label:45s} false FAIL {rate}; failed tests: {tests}; the runs' PIT "
                    f"p-values against U(0, 1): KS p = {calibration:.2f}"
                )
                fails, judged = fails + rate.fails, judged + rate.runs
                for t, n in (rate.by_test or {}).items():
                    by_test[t] = by_test.get(t, 0) + n
                figures[f"{docs} documents, {label}"] = {
                    "fails": rate.fails,
                    "runs": rate.runs,
                    "rate": rate.value,
                    "ci95": rate.interval(),
                    "by_test": rate.by_test,
                    "p_values_ks": calibration,
                }
        pooled = Rate(fails, judged)
        tests = ", ".join(f"{t} {n}" for t, n in sorted(by_test.items())) or "none"
        print(f"  {docs:4d} documents  ALL: false FAIL {pooled} against alpha {args.alpha}; failed tests: {tests}")
        figures[f"{docs} documents"] = {
            "fails": fails,
            "judgments": judged,
            "rate": pooled.value,
            "ci95": pooled.interval(),
            "by_test": by_test,
        }
    return figures


def _power(args) -> dict:
    from .verify_bank import load_bank, record_bank, save_bank

    if args.record:
        from ..evals.bench.prompts import bench_prompts

        prompts = bench_prompts("gsm8k", args.docs, args.data_dir)
        sampling = SamplingParams(max_new_tokens=args.tokens, temperature=0.7, ignore_eos=True, seed=args.seed)
        started = time.perf_counter()
        steps = record_bank(prompts, sampling, model=args.model)
        save_bank(steps, args.bank)
        print(
            f"recorded {len(steps)} verify steps of {args.docs} documents x {args.tokens} tokens ({args.model}, "
            f"Eagle3 K=3) in {time.perf_counter() - started:.0f} s into {args.bank}"
        )
    steps = load_bank(args.bank)
    if args.use_docs:
        steps = [s for s in steps if s.doc < args.use_docs]
    classes = ["unmutated", *(args.classes or REJECTION_POINTS)]
    figures = {}
    print(
        f"power: {args.replicates} replays of the bank ({len(steps)} verify steps, {len({s.doc for s in steps})} "
        f"documents), alpha {args.alpha}"
    )
    for config, params in CONFIGS.items():
        if args.config and config != args.config:
            continue
        shown = {c: _progress(f"{config}, {c}", args.replicates) for c in classes}
        rates = power_rates(
            steps,
            params,
            classes,
            args.replicates,
            args.vocab_size,
            args.seed,
            args.alpha,
            lambda c, i, shown=shown: shown[c](i),
        )
        for name, r in rates.items():
            what = "false FAIL" if name == "unmutated" else "FAIL"
            idle = name != "unmutated" and not can_change(name, params)
            print(
                f"  {config:26s} {name:24s} {what} {r['rate']}; {r['positions']} positions, support violations in "
                f"{r['support_violations_in']} runs, median PIT p {r['median_pit_p']:.2g}, median likelihood z "
                f"{r['median_likelihood_z']:+.1f}, median within-request p {r['median_within_p']:.2g}, FAILs only "
                f"the within-request test saw {r['within_only']}, by the direct tests {r['direct']}; from the outputs "
                f"alone (drafts unknown) FAIL {r['outputs_only']}"
                + ("  (changes nothing at this configuration: it does not fire)" if idle else "")
            )
            figures[f"{config}, {name}"] = {
                "fails": r["rate"].fails,
                "runs": r["rate"].runs,
                "rate": r["rate"].value,
                "support_violations_in": r["support_violations_in"],
                "median_pit_p": r["median_pit_p"],
                "median_likelihood_z": r["median_likelihood_z"],
                "median_within_p": r["median_within_p"],
                "within_only": r["within_only"],
                "positions": r["positions"],
                "direct": r["direct"],
                "outputs_only": r["outputs_only"].fails,
            }
    return figures


def _smooth(args) -> dict:
    """The smooth test's chi-square p-value against its exact null: u i.i.d. U(0, 1) (what the randomized PIT gives
    a clean run), so the rate of p below each level must be that level at the run's size."""
    from ..stats.pit import smooth_test

    rng = np.random.default_rng(args.seed)
    levels = (0.05, 0.01, 0.005, args.alpha / 3, args.alpha / 5, args.alpha / 8)  # the Bonferroni shares
    figures = {}
    for n in args.n:
        below = dict.fromkeys(levels, 0)
        for _ in range(args.replicates):
            p = smooth_test(rng.random(n)).p_value
            for level in levels:
                below[level] += p < level
        rates = {level: count / args.replicates for level, count in below.items()}
        se = {level: math.sqrt(level * (1 - level) / args.replicates) for level in levels}
        print(
            f"  n {n:6d}: "
            + "  ".join(f"P(p < {level:.4g}) = {rate:.4f} (+- {se[level]:.4f})" for level, rate in rates.items())
        )
        figures[str(n)] = {str(level): rate for level, rate in rates.items()}
    return figures


def _sampler(args) -> dict:
    from .rejection_sampler_fit import CASES, chi_square_check

    figures = {}
    print(f"sampler: chi-square goodness of fit per position of one verify step, {args.trials} trials per case")
    for case in CASES:
        for name in ("unmutated", *REJECTION_POINTS):
            results = chi_square_check(case, class_rule(name), args.trials, args.seed)
            worst = min(results, key=lambda c: c.p_value)
            cells = "  ".join(
                f"pos {c.position}: chi2 {c.statistic:.1f} df {c.df} p {c.p_value:.3g} (n {c.n})" for c in results
            )
            print(f"  {case.name:34s} {name:24s} min p {worst.p_value:.3g} | {cells}")
            figures[f"{case.name}, {name}"] = [c.__dict__ for c in results]
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m specdec_eval.studies.lossless_sampled",
        description="The sampled lossless gate's seeded simulation (false-FAIL rate, power per bug class) and the "
        "rejection sampler's chi-square.",
        epilog="Example: python -m specdec_eval.studies.lossless_sampled null --runs 500",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--alpha", type=float, default=ALPHA)
    parser.add_argument("--json", help="also write the figures to this file")
    modes = parser.add_subparsers(dest="mode", required=True)
    null = modes.add_parser("null", help="false-FAIL rate on seeded clean synthetic runs")
    null.add_argument("--runs", type=int, default=500)
    null.add_argument("--first", type=int, default=0, help="number of the first run (split a study over commands)")
    null.add_argument("--docs", type=int, nargs="+", default=[10], help="run sizes (documents per run)")
    null.add_argument("--config", choices=list(CONFIGS), default=None, help="only this sampling configuration")
    null.add_argument("--tokens", type=int, default=256)
    null.add_argument("--vocab", type=int, default=512)
    power = modes.add_parser("power", help="FAIL rate per sampled bug class on a bank of real verify steps")
    power.add_argument("--bank", required=True, help="the bank file (.npz): read, or written first with --record")
    power.add_argument("--record", action="store_true", help="record the bank first (needs --data-dir)")
    power.add_argument("--data-dir", default=None, help="where GSM8K is (for --record)")
    power.add_argument("--model", default="smollm2")
    power.add_argument("--docs", type=int, default=10)
    power.add_argument("--tokens", type=int, default=256)
    power.add_argument("--replicates", type=int, default=100)
    power.add_argument("--use-docs", type=int, default=None, help="replay only the bank's first N documents")
    power.add_argument("--config", choices=list(CONFIGS), default=None, help="only this sampling configuration")
    power.add_argument("--classes", nargs="+", choices=REJECTION_POINTS, default=None, help="only these classes")
    power.add_argument("--vocab-size", type=int, default=49152)
    smooth = modes.add_parser(
        "smooth", help="the smooth test's chi-square p-value on exact null draws (u i.i.d. uniform)"
    )
    smooth.add_argument("--n", type=int, nargs="+", default=[300, 2560], help="positions per run")
    smooth.add_argument("--replicates", type=int, default=100_000)
    sampler = modes.add_parser("sampler", help="chi-square of the rejection sampler on hand-made distributions")
    sampler.add_argument("--trials", type=int, default=20_000)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    figures = {"null": _null, "power": _power, "smooth": _smooth, "sampler": _sampler}[args.mode](args)
    print(f"({time.perf_counter() - started:.0f} s)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"mode": args.mode, "args": vars(args), "figures": figures}, f, indent=1, default=str)


if __name__ == "__main__":
    main()
