"""Few-shot GSM8K test prompts as JSON lines for `specdec-eval generate` (the prompts `bench --prompts gsm8k` uses:
train-set shots, a seeded choice of test questions). No GSM8K answer of a test question is written.

Example:
  python scripts/gsm8k_prompts.py --data-dir ../shared/data --count 32 > /tmp/gsm8k.jsonl
  specdec-eval generate /tmp/gsm8k.jsonl --spec eagle3 -n 128 > /dev/null     # acceptance on stderr
"""

from __future__ import annotations

import argparse
import json

from specdec_eval.evals.tasks.gsm8k import load_gsm8k_split
from specdec_eval.workers.draft_training.prompts import fewshot_prompts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", default=None, help="folder with gsm8k/ (else $SPECDEC_EVAL_DATA or the HF cache)")
    parser.add_argument("--count", type=int, default=32, help="test questions")
    parser.add_argument("--shots", type=int, default=5, help="solved train questions before each")
    parser.add_argument("--seed", type=int, default=1234, help="which test questions and shots")
    args = parser.parse_args(argv)
    test = load_gsm8k_split(args.data_dir, "test")
    prompts = fewshot_prompts(
        test, args.count, args.shots, seed=args.seed, shots_from=load_gsm8k_split(args.data_dir, "train")
    )
    for prompt in prompts:
        print(json.dumps({"prompt": prompt}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
