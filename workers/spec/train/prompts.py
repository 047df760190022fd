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


def fewshot_prompts(docs: Sequence[dict], num_prompts: int, num_shots: int, seed: int) -> list[str]:
    """Prompts for docs[0:num_prompts], each with `num_shots` other docs as examples (deterministic in seed)."""
    if num_prompts > len(docs):
        raise ValueError(f"asked for {num_prompts} prompts, the split has {len(docs)} questions")
    rng = random.Random(seed)
    prompts = []
    for i in range(num_prompts):
        pool = [j for j in rng.sample(range(len(docs)), num_shots + 1) if j != i][:num_shots]
        shots = "".join(format_shot(docs[j]) + "\n\n" for j in pool)
        prompts.append(f"{shots}Question: {docs[i]['question']}\nAnswer:")
    return prompts
