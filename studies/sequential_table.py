"""`python -m specdec_eval.studies.sequential_table`: what the sequential designs cost and save against the fixed-n
tests, for one reference and sample count. `design_report` returns the numbers, `render` the table, `main` is
the command (argparse: evals/ sits below cli/ in the import order)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..evals.sequential.accuracy import AccuracySequentialDesign
from ..evals.sequential.discordant_pairs import PairedSequentialDesign, fixed_pairs_needed

EXAMPLE = """example:
  python -m specdec_eval.studies.sequential_table --n 1319 --batch 64 --ref 74.2
  python -m specdec_eval.studies.sequential_table --n 198 --batch 32 --ref 65.0 --floor 25 --p1 0.25 --json
"""


def design_report(
    n: int,
    batch: int,
    ref: float,
    alpha: float = 0.05,
    beta: float = 0.2,
    sigma: float = 50.0,
    floor: float = 0.0,
    p1: float = 1 / 3,
    sims: int = 10_000,
    seed: int = 0,
) -> dict[str, Any]:
    """Operating characteristics of the accuracy design (and of the fixed-n gate, the one-look design) at ref and
    at ref - theta, numerically under the two-sample model and by Bernoulli simulation with the reference exact;
    and of the paired SPRT (exact and simulated) against the fixed-sample exact binomial test."""
    options = dict(alpha=alpha, beta=beta, sigma=sigma, floor=floor)
    sequential = AccuracySequentialDesign.for_batches(ref, n, batch, **options)
    fixed = AccuracySequentialDesign(ref, n, (n,), **options)
    alternative = ref - sequential.theta
    rows = []
    for name, design in (("fixed-n", fixed), ("sequential", sequential)):
        for model in ("two-sample model", "simulated"):
            # a Bernoulli mean cannot fall below 0: there, the power is that of a run scoring 0
            means = (ref, alternative if model != "simulated" else max(0.0, alternative))
            at = [_point(design, mean, model, sims, seed) for mean in means]
            rows.append(
                {
                    "design": name,
                    "model": model,
                    "n_fixed": n,
                    "expected_n_at_ref": at[0].expected_n,
                    "expected_n_at_alternative": at[1].expected_n,
                    "false_fail": at[0].p_fail,
                    "power": at[1].p_fail,
                }
            )
    paired = PairedSequentialDesign(alpha=alpha, beta=beta, p1=p1)
    m_fixed = fixed_pairs_needed(alpha, beta, p1)
    paired_rows = []
    for model in ("exact", "simulated"):
        h0, h1 = (
            paired.operating_characteristics(p) if model == "exact" else paired.simulate(p, sims, seed)
            for p in (0.5, p1)
        )
        paired_rows.append(
            {
                "model": model,
                "m_fixed": m_fixed,
                "m_max": paired.truncation,
                "expected_pairs_h0": h0.expected_pairs,
                "expected_pairs_h1": h1.expected_pairs,
                "false_b_worse": h0.p_worse,
                "power": h1.p_worse,
            }
        )
    return {
        "accuracy": {"design": sequential.to_dict(), "alternative": alternative, "rows": rows},
        "paired": {"design": paired.to_dict(), "rows": paired_rows},
        "sims": sims,
        "seed": seed,
    }


def _point(design: AccuracySequentialDesign, mean: float, model: str, sims: int, seed: int):
    if model == "simulated":
        return design.expected_sample_size(mean, sims=sims, seed=seed)
    return design.operating_characteristics(mean)


def render(report: dict[str, Any]) -> str:
    acc, pair = report["accuracy"], report["paired"]
    d, p = acc["design"], pair["design"]
    looks = d["looks"]
    shown = ", ".join(map(str, looks[:2])) + (", ..." if len(looks) > 2 else "")
    lines = [
        f"Accuracy gate: ref {d['ref']:.2f}, N {d['n_max']}, {len(looks)} looks ({shown}), alpha {d['alpha']}, "
        f"beta {d['beta']}, sigma {d['sigma']:g}",
        f"  FAIL spending {d['fail_spending']}, non-binding PASS spending {d['pass_spending']}; fixed-n threshold "
        f"{d['fixed_threshold']:.3f}, theta {d['theta']:.3f}, ref - theta {acc['alternative']:.3f}"
        + ("" if d["can_fail"] else f"; threshold <= floor {d['floor']:g}: PASS reads NO-GATE")
        + ("" if acc["alternative"] >= 0 else "; ref - theta < 0: simulated at 0"),
        f"  two-sample model: normal, the reference a mean of {d['n_ref']} samples, numerical integration; "
        f"simulated: Bernoulli samples, reference exact, {report['sims']} runs, seed {report['seed']}",
        "",
        f"  {'design':<11}{'model':<18}{'n_fixed':>8}{'E[N] at ref':>13}{'E[N] at ref-theta':>19}"
        f"{'false FAIL':>12}{'power':>8}",
    ]
    for r in acc["rows"]:
        lines.append(
            f"  {r['design']:<11}{r['model']:<18}{r['n_fixed']:>8}{r['expected_n_at_ref']:>13.1f}"
            f"{r['expected_n_at_alternative']:>19.1f}{r['false_fail']:>12.4f}{r['power']:>8.4f}"
        )
    lines += [
        "",
        f"Paired A/B (SPRT on discordant pairs): H0 p = 0.5, H1 p = p1 = {p['p1']:.3f} (p: B right on a discordant "
        f"pair), alpha {p['alpha']}, beta {p['beta']}; log-LR bounds {p['lower']:.3f} / {p['upper']:.3f}",
        "  m_fixed: pairs the fixed exact binomial test needs; m_max: the SPRT's truncation; "
        "documents needed ~ pairs / discordant fraction",
        "",
        f"  {'model':<11}{'m_fixed':>8}{'m_max':>7}{'E[M] at 1/2':>13}{'E[M] at p1':>12}{'false B-worse':>15}"
        f"{'power':>8}",
    ]
    for r in pair["rows"]:
        lines.append(
            f"  {r['model']:<11}{r['m_fixed']:>8}{r['m_max']:>7}{r['expected_pairs_h0']:>13.1f}"
            f"{r['expected_pairs_h1']:>12.1f}{r['false_b_worse']:>15.4f}{r['power']:>8.4f}"
        )
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m specdec_eval.studies.sequential_table",
        description="Expected sample size and error rates of the sequential accuracy gate and the sequential "
        "paired A/B test, against the fixed-n tests.",
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--n", type=int, required=True, help="planned sample count N (the full set: 1319, 198)")
    parser.add_argument("--batch", type=int, required=True, help="samples per look (the last look is N)")
    parser.add_argument("--ref", type=float, required=True, help="reference score, 0-100")
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--beta", type=float, default=0.2)
    parser.add_argument("--sigma", type=float, default=50.0)
    parser.add_argument("--floor", type=float, default=0.0, help="score of a broken model (25 for GPQA)")
    parser.add_argument("--p1", type=float, default=1 / 3, help="P(B right | discordant) that 'B worse' means")
    parser.add_argument("--sims", type=int, default=10_000, help="simulated runs per point")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not 0.0 <= args.ref <= 100.0 or args.n < 1 or args.batch < 1 or args.sims < 1:
        parser.error("need 0 <= --ref <= 100 and positive --n, --batch, --sims")
    try:
        report = design_report(
            args.n, args.batch, args.ref, args.alpha, args.beta, args.sigma, args.floor, args.p1, args.sims, args.seed
        )
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
