"""Cross-engine exactness: our engine's greedy tokens against a plain vLLM server's on the same prompt token ids, both
float32. Prints how many outputs are identical and, for each that is not, where it first diverges and each engine's
logit margin there (top-1 minus top-2 log-probability: a near tie is where two correct float32 engines may part).

Example (a plain vLLM server over the exported SmolLM2, as tests/vllm_server.py starts it):
  .venv/bin/python scripts/vllm_vs_ours.py --url http://127.0.0.1:8000 --data-dir ../shared/data --count 8 -n 64
"""

from __future__ import annotations

import argparse

import httpx
from specdec_eval.evals.tasks.gsm8k import load_gsm8k_split
from specdec_eval.workers.config import EngineConfig, SamplingParams
from specdec_eval.workers.draft_training.prompts import fewshot_prompts
from specdec_eval.workers.engine.engine import Engine


def vllm_greedy(url: str, model: str, prompt_ids: list[int], n: int) -> tuple[list[int], list[float]]:
    """vLLM's greedy tokens (as ids) and its margin at each position."""
    r = httpx.post(
        f"{url}/v1/completions",
        timeout=600,
        json={
            "model": model,
            "prompt": prompt_ids,
            "max_tokens": n,
            "temperature": 0.0,
            "ignore_eos": True,
            "logprobs": 2,
            "return_tokens_as_token_ids": True,
        },
    )
    r.raise_for_status()
    lp = r.json()["choices"][0]["logprobs"]
    ids = [int(t.removeprefix("token_id:")) for t in lp["tokens"]]
    margins = [_margin(list(top.values())) for top in lp["top_logprobs"]]
    return ids, margins


def _margin(logprobs: list[float]) -> float:
    best = sorted(logprobs, reverse=True)
    return best[0] - best[1] if len(best) > 1 else float("inf")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", required=True, help="a plain vLLM server over the exported model")
    parser.add_argument("--served-model", default="smollm2")
    parser.add_argument("--data-dir", default=None, help="folder with gsm8k/")
    parser.add_argument("--count", type=int, default=8, help="GSM8K test prompts (3-shot)")
    parser.add_argument("-n", "--max-new-tokens", type=int, default=64)
    args = parser.parse_args(argv)

    prompts = fewshot_prompts(
        load_gsm8k_split(args.data_dir, "test"),
        args.count,
        3,
        seed=1234,
        shots_from=load_gsm8k_split(args.data_dir, "train"),
    )
    engine = Engine.build(EngineConfig(model="smollm2", dtype="float32", device="cpu"))
    params = SamplingParams(max_new_tokens=args.max_new_tokens, ignore_eos=True, logprobs=2)
    ours = engine.generate(prompts, params)
    identical, lines = 0, []
    for i, out in enumerate(ours):
        theirs, their_margins = vllm_greedy(args.url, args.served_model, out.prompt_token_ids, args.max_new_tokens)
        if theirs == out.token_ids:
            identical += 1
            continue
        at = next(p for p, (a, b) in enumerate(zip(out.token_ids, theirs, strict=False)) if a != b)
        our_margin = _margin([lp for _, lp in out.logprobs[at][1]])
        lines.append(
            f"  prompt {i}: first divergence at token {at}: ours {out.token_ids[at]} (margin "
            f"{our_margin:.4f}), vLLM {theirs[at]} (margin {their_margins[at]:.4f})"
        )
    print(f"identical: {identical}/{len(ours)} greedy outputs of {args.max_new_tokens} tokens (float32, ours vs vLLM)")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
