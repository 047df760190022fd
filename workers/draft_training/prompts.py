"""Training prompts in lm-eval's `gsm8k` format: "Question: ...\nAnswer: ..." shots, then the question.

The evaluation uses 5 random shots from the train split; training prompts use the same format with fewer shots
(prefill dominates collection time on a CPU) drawn with a seeded generator, never the question itself.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

STOP = ("Question:", "</s>", "<|im_end|>")  # lm-eval gsm8k `until`


def format_shot(doc: dict) -> str:
    return f"Question: {doc['question']}\nAnswer: {doc['answer']}"


def fewshot_prompts(
    docs: Sequence[dict], num_prompts: int, num_shots: int, seed: int, shots_from: Sequence[dict] | None = None
) -> list[str]:
    """Prompts for docs[0:num_prompts], each with `num_shots` examples (deterministic in seed): other docs of the
    same list, or docs of `shots_from` (e.g. test questions with train-split shots, as lm-eval builds them)."""
    if num_prompts > len(docs):
        raise ValueError(f"asked for {num_prompts} prompts, the split has {len(docs)} questions")
    rng = random.Random(seed)
    pool_docs = docs if shots_from is None else shots_from
    prompts = []
    for i in range(num_prompts):
        picked = rng.sample(range(len(pool_docs)), num_shots + 1)
        picked = [j for j in picked if shots_from is not None or j != i][:num_shots]
        shots = "".join(format_shot(pool_docs[j]) + "\n\n" for j in picked)
        prompts.append(f"{shots}Question: {docs[i]['question']}\nAnswer:")
    return prompts
