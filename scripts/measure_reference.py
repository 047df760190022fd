"""Measure a reference accuracy on a full task with non-speculative greedy decoding, and write the summary and
per-sample records (no GPQA text) to a folder. Same code path as `specdec-eval run --no-reference`.
Finished generations are kept in OUT/partial/, so a measurement that was stopped (a full set takes hours on a
2-core CPU) continues where it stopped when the same command runs again.

  python scripts/measure_reference.py --model smollm2 --task gsm8k --data-dir ../shared/data --out refs/gsm8k
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

from specdec_eval.evals.pipeline.evaluation import evaluate
from specdec_eval.evals.pipeline.resume import GenerationCache
from specdec_eval.evals.run_types import EvalOptions
from specdec_eval.evals.tasks.registry import parse_tasks
from specdec_eval.workers.config import EngineConfig, KVCacheConfig
from specdec_eval.workers.engine.engine import Engine


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2")
    p.add_argument("--task", required=True)
    p.add_argument("--data-dir", required=True)
    p.add_argument("--limit", type=int, default=None)
    p.add_argument("--kv-cache", default="v1")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    engine = Engine.build(EngineConfig(model=args.model, kv_cache=KVCacheConfig(version=args.kv_cache)))
    start = time.time()

    def progress(done: int, total: int, stats) -> None:
        if done >= progress.next or done == total:
            progress.next = done + 25
            print(f"{done}/{total} done, {stats.output_tokens_per_s:.1f} tok/s, {time.time() - start:.0f}s", flush=True)

    progress.next = 0
    options = EvalOptions(parse_tasks(args.task), data_dir=args.data_dir, limit=args.limit, no_reference=True)
    cache = GenerationCache(out / "partial")
    resumed = len(cache.entries)
    if resumed:
        print(f"resuming: {len(cache.entries)} finished generations in {out / 'partial'}", flush=True)
    (result,) = evaluate(engine, options, progress, cache)
    elapsed = time.time() - start
    with (out / "samples.jsonl").open("w") as f:
        for s in result.samples:
            f.write(json.dumps(s) + "\n")
    summary = {
        "task": result.task,
        "num_samples": result.num_samples,
        "score": result.score,
        "filter_scores": result.filter_scores,
        "elapsed_s": round(elapsed, 1),
        "resumed_generations": resumed,
        "data": result.data_origin,
        "filter_mismatches": result.filter_mismatches,
        "command": "python " + " ".join(sys.argv),
        "machine": platform.processor() or platform.machine(),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
