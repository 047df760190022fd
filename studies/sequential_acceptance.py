"""`python -m specdec_eval.studies.sequential_acceptance`: what the acceptance gate and the paired acceptance A/B
can see, by simulation from the per-document acceptance of real runs.

Given run A (a spec-dec run: its documents' draft cycles and accepted drafts are the population) and optionally run
B (the same documents with a change, e.g. `--inject aux_layers_off_by_one`):

1. **The single-run gate** (`gates.acceptance`) at each n: what its power statement says (the smallest drop
   it detects with power 0.8, its false-FAIL rate, its chance at a drop to min_al = 5 %), against simulated runs of n
   documents drawn from A's with replacement, ref_al = A's AL: how often it FAILs an unchanged drafter (below its
   band), one whose every document lost the stated drop, and one that lost 5 % (outputs kept: cycles grow as
   acceptance falls); and the drop 80 % of simulated runs catch (the simulated MDE). Also the design effect: how
   much wider the error of AL is with documents as clusters than if every draft cycle were an independent trial.
2. **The paired test** (stats.acceptance_ratio, fixed n) and **the sequential A/B** (sequential.
   acceptance_ab, looks every `--batch` documents), over A/Bs of n documents drawn from the measured pairs: under
   no change (each document's two sides swapped by a coin: a change that moves acceptance as much as B's does,
   in no direction), at B's measured drop, and at a drop of exactly 5 % (B's documents rescaled: its per-document
   noise kept). Reported: how often a drop is shown (false detection under no change; power otherwise), how often
   a 5 % drop is ruled out, and the documents the sequential A/B used.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

from ..evals.gates.acceptance import acceptance_gate
from ..evals.gates.acceptance_gate import acceptance_slack
from ..evals.gates.acceptance_power import SLACK_Z, gate_power
from ..evals.sequential.acceptance_ab import AcceptanceSequentialDesign, simulate
from ..results.acceptance_paired import doc_counts
from ..results.paired import pair_samples
from ..results.store import Run
from ..stats.acceptance_ratio import judge_pairs, paired_acceptance

EXAMPLE = """example:
  specdec-eval run --tasks gsm8k --limit 200 --sample random --spec eagle3 --data-dir ../shared/data --out runs-a
  specdec-eval run ... --out runs-b --inject aux_layers_off_by_one        # the same documents, a planted bug
  python -m specdec_eval.studies.sequential_acceptance runs-a/RUN_ID runs-b/RUN_ID --n 10,50,200
"""

Pool = np.ndarray  # (documents, 2): draft cycles, accepted drafts


def run_counts(run_dir: str, task: str | None = None) -> tuple[str, dict[Any, tuple[float, float]], list[float]]:
    """(task, doc id -> (cycles, accepted), per-position acceptance rates) of a finished run's spec-dec task (the
    first with counts, or `task`)."""
    samples = Run(Path(run_dir)).samples()
    tasks = [t for t in dict.fromkeys(s.task for s in samples) if task in (None, t)]
    for name in tasks:
        mine = [s for s in samples if s.task == name and doc_counts(s) is not None]
        if mine:
            counts = {s.doc_id: doc_counts(s) for s in mine}
            positions = [s.acceptance.get("accepted_per_position") or [] for s in mine]
            width = max(map(len, positions))
            cycles = sum(c for c, _ in counts.values())
            rates = [sum(p[i] for p in positions if len(p) > i) / cycles for i in range(width)]
            return name, counts, rates
    raise ValueError(f"{run_dir}: no sample of {task or 'any task'} carries acceptance counts (not a spec-dec run?)")


def paired_pool(run_a: str, run_b: str, task: str | None = None) -> np.ndarray:
    """(documents, 4): A's cycles and accepted drafts, B's, for the documents both runs drafted."""
    samples_a, samples_b = Run(Path(run_a)).samples(), Run(Path(run_b)).samples()
    name, _, _ = run_counts(run_a, task)
    rows = []
    for x, y in pair_samples(samples_a, samples_b).get(name, []):
        ca, cb = doc_counts(x), doc_counts(y)
        if ca is not None and cb is not None:
            rows.append((*ca, *cb))
    if len(rows) < 2:
        raise ValueError(f"{run_a} and {run_b} share fewer than two documents with acceptance counts")
    return np.asarray(rows, dtype=float)


def lowered(pool: Pool, drop: float) -> Pool:
    """Each document's AL times (1 - drop), its output tokens (cycles + accepted) kept."""
    tokens = pool[:, 0] + pool[:, 1]
    cycles = tokens / ((1 + pool[:, 1] / pool[:, 0]) * (1 - drop))
    return np.stack([cycles, tokens - cycles], axis=1)


def design_effect(pool: Pool, rates: list[float]) -> float:
    """Var(AL) with documents as clusters over Var(AL) if every draft cycle were an independent draw (the model that
    treats cycles as units). A cycle accepts drafts 0..i-1 or none (chain drafting): with r_i the rate of position
    i, its count has variance sum_i r_i (1 - r_i) + 2 sum_{i<j} r_j (1 - r_i) (accepting j implies accepting i)."""
    per_cycle = sum(r * (1 - r) for r in rates)
    per_cycle += 2 * sum(rates[j] * (1 - rates[i]) for i in range(len(rates)) for j in range(i + 1, len(rates)))
    naive = per_cycle / pool[:, 0].sum()
    clustered = (acceptance_slack([tuple(r) for r in pool]) / SLACK_Z) ** 2
    return clustered / naive if naive > 0 else math.nan


def gate_study(pool: Pool, rates: list[float], ns: list[int], sims: int, seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    ref = 1 + pool[:, 1].sum() / pool[:, 0].sum()
    refs = {"t": {"ref_al": ref, "min_al": 0.95 * ref}}
    se_one = acceptance_slack([tuple(r) for r in pool]) * math.sqrt(len(pool))  # the slack of one document
    rows = []
    for n in ns:
        stated = gate_power(ref, 0.95 * ref, 0.05, se_one / math.sqrt(n), n)
        fails = {}
        for name, drop in (("unchanged", 0.0), ("stated_mde", stated.mde), ("five_percent", 0.05)):
            source = lowered(pool, drop) if drop else pool
            count = 0
            for _ in range(sims):
                docs = source[rng.integers(0, len(source), n)]
                stats = {"num_cycles": float(docs[:, 0].sum()), "num_accepted_drafts": float(docs[:, 1].sum())}
                gate = acceptance_gate("t", stats, refs, slack=acceptance_slack([tuple(r) for r in docs]))
                count += gate["verdict"] == "FAIL" and gate["acceptance_length"] < ref
            fails[name] = count / sims
        simulated = _simulated_mde(pool, ref, n, 1 - stated.beta, sims, rng)
        rows.append({"n": n, "stated": stated.to_json(), "simulated_fail": fails, "simulated_mde": simulated})
    return {"ref_al": ref, "documents": len(pool), "design_effect": design_effect(pool, rates), "rows": rows}


def _simulated_mde(pool: Pool, ref: float, n: int, power: float, sims: int, rng: np.random.Generator) -> float:
    """The drop that `power` of simulated runs of n documents FAIL below the band: the same runs at every drop
    (lowering every document's AL by d scales each cycle count by 1 / (1 - d), so a run's AL and its slack both
    scale by 1 - d), searched by bisection on the gate's floor (band_floor, as `acceptance_gate` applies it)."""
    als, slacks = np.empty(sims), np.empty(sims)
    for i in range(sims):
        docs = pool[rng.integers(0, len(pool), n)]
        als[i] = 1 + docs[:, 1].sum() / docs[:, 0].sum()
        slacks[i] = acceptance_slack([tuple(r) for r in docs])

    def caught(drop: float) -> float:
        al, slack = als * (1 - drop), slacks * (1 - drop)
        floor = np.maximum(0.95 * ref - slack, ref * (1 - np.maximum(0.05, slack / ref)))
        return float((al < floor).mean())

    lo, hi = 0.0, 1 - 1 / ref
    if caught(hi) < power:
        return hi
    for _ in range(30):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if caught(mid) >= power else (mid, hi)
    return hi


def paired_study(pairs: np.ndarray, ns: list[int], batch: int, sims: int, seed: int) -> dict[str, Any]:
    test = judge_pairs([((r[0], r[1]), (r[2], r[3])) for r in pairs])
    measured = paired_acceptance([((r[0], r[1]), (r[2], r[3])) for r in pairs])
    scale = 0.95 / (1 + measured.relative)  # B's documents rescaled to exactly a 5 % drop
    five = np.concatenate([pairs[:, :2], _scaled_side(pairs[:, 2:], scale)], axis=1)
    cases = {
        "no change (sides swapped at random)": (pairs, True),
        f"B as measured ({measured.relative:+.2%})": (pairs, False),
        "exactly 5 % (B rescaled)": (five, False),
    }
    rows = []
    for n in ns:
        design = AcceptanceSequentialDesign.for_batches(n, batch) if n >= 2 else None
        for name, (source, swap) in cases.items():
            fixed = _fixed(source, n, swap, sims, seed)
            seq = simulate(design, _drawer(source, swap), sims=sims, seed=seed) if design else None
            rows.append(
                {
                    "n": n,
                    "case": name,
                    "fixed": fixed,
                    "sequential": None
                    if seq is None
                    else {
                        "drop": seq.p_drop,
                        "no_drop": seq.p_no_drop,
                        "inconclusive": seq.p_inconclusive,
                        "expected_documents": seq.expected_n,
                    },
                }
            )
    return {"documents": len(pairs), "measured": test.to_json(), "batch": batch, "rows": rows}


def _scaled_side(side: np.ndarray, factor: float) -> np.ndarray:
    """A side's documents with every AL times `factor`, output tokens kept."""
    return lowered(side, 1 - factor)


def _drawer(source: np.ndarray, swap: bool):
    def draw(rng: np.random.Generator, n: int) -> np.ndarray:
        rows = source[rng.integers(0, len(source), n)].copy()
        if swap:
            flip = rng.random(n) < 0.5
            rows[flip] = rows[flip][:, [2, 3, 0, 1]]
        return rows

    return draw


def _fixed(source: np.ndarray, n: int, swap: bool, sims: int, seed: int) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    draw = _drawer(source, swap)
    shown = ruled = 0
    for _ in range(sims):
        rows = draw(rng, n)
        test = judge_pairs([((r[0], r[1]), (r[2], r[3])) for r in rows])
        shown += test.drop_shown
        ruled += test.drop_ruled_out and not test.drop_shown
    return {"drop": shown / sims, "no_drop": ruled / sims}


def render(report: dict[str, Any]) -> str:
    g = report["gate"]
    lines = [
        f"Acceptance gate (one run against ref_al): population {g['documents']} documents of run A, ref_al = its AL "
        f"{g['ref_al']:.4f}, min_al = 0.95 ref_al; {report['sims']} simulated runs per cell, seed {report['seed']}",
        f"  design effect (documents as clusters vs independent cycles): {g['design_effect']:.2f}",
        "  P(FAIL) counts FAILs below the band only (the gate also FAILs a rise)",
        "",
        f"  {'n':>5}  {'stated MDE':>10}  {'stated alpha':>12}  {'stated P(5%)':>12}  {'band > min_al':>13}  "
        f"{'sim P(FAIL) none':>16}  {'at MDE':>7}  {'at 5%':>6}  {'simulated MDE':>13}",
    ]
    for r in g["rows"]:
        s, f = r["stated"], r["simulated_fail"]
        lines.append(
            f"  {r['n']:>5}  {s['mde']:>10.1%}  {s['alpha']:>12.4f}  {s['p_detect_min_al']:>12.3f}  "
            f"{'yes' if s['band_wider_than_min_al'] else 'no':>13}  {f['unchanged']:>16.4f}  "
            f"{f['stated_mde']:>7.3f}  {f['five_percent']:>6.3f}  {r['simulated_mde']:>13.1%}"
        )
    if g["rows"]:
        lines.append(f"  statement at n = {g['rows'][0]['n']}: {g['rows'][0]['stated']['statement']}")
    p = report.get("paired")
    if p:
        m = p["measured"]
        lines += [
            "",
            f"Paired by document (A vs B over {p['documents']} shared documents): {m['reason']}",
            f"  per-document sd of the relative change {m['std_error'] * math.sqrt(m['n']):.3f}; fixed test: "
            f"{m['method']}; sequential: looks every {p['batch']} documents, alpha 0.05, beta 0.2, 5 % drop",
            "",
            f"  {'n':>5}  {'case':<40}  {'fixed: drop shown':>17}  {'5% ruled out':>12}  {'seq: drop':>9}  "
            f"{'ruled out':>9}  {'E[docs]':>7}",
        ]
        for r in p["rows"]:
            seq = r["sequential"] or {}
            fixed = r["fixed"]
            lines.append(
                f"  {r['n']:>5}  {r['case']:<40}  {fixed['drop']:>17.4f}  {fixed['no_drop']:>12.4f}  "
                f"{seq.get('drop', math.nan):>9.4f}  {seq.get('no_drop', math.nan):>9.4f}  "
                f"{seq.get('expected_documents', math.nan):>7.1f}"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m specdec_eval.studies.sequential_acceptance",
        description="What the acceptance gate and the paired acceptance A/B can see, by simulation from the "
        "per-document acceptance of real runs.",
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("run_a", help="a finished spec-dec run folder (the population, side A)")
    parser.add_argument("run_b", nargs="?", help="a run of the same documents with a change (side B)")
    parser.add_argument("--task", default=None, help="the task (default: the first with acceptance counts)")
    parser.add_argument("--n", default="10,50,200", help="document counts, comma-separated")
    parser.add_argument("--batch", type=int, default=32, help="documents per look of the sequential A/B")
    parser.add_argument("--sims", type=int, default=2000, help="simulated runs or A/Bs per cell")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON")
    args = parser.parse_args(argv)
    try:
        ns = [int(x) for x in args.n.split(",") if x.strip()]
        if not ns or min(ns) < 2 or args.sims < 1 or args.batch < 1:
            parser.error("need --n of counts >= 2, positive --sims and --batch")
        _, counts, rates = run_counts(args.run_a, args.task)
        pool = np.asarray(list(counts.values()), dtype=float)
        report: dict[str, Any] = {
            "sims": args.sims,
            "seed": args.seed,
            "run_a": args.run_a,
            "run_b": args.run_b,
            "gate": gate_study(pool, rates, ns, args.sims, args.seed),
        }
        if args.run_b:
            pairs = paired_pool(args.run_a, args.run_b, args.task)
            report["paired"] = paired_study(pairs, ns, args.batch, args.sims, args.seed)
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
