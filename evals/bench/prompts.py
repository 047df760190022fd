"""The prompts `bench` measures on: a built-in varied set, or 5-shot GSM8K test prompts (the shipped draft head's
training distribution)."""

from __future__ import annotations

from ...errors import UserError

# Varied, self-written prompts: instructions, arithmetic, code, lists, prose, of different lengths.
BENCH_PROMPTS = [
    "The capital of France is",
    "Write a short poem about the sea.",
    "def fibonacci(n):",
    "Explain why the sky is blue in one paragraph.",
    "A farmer has 12 cows and buys 7 more. Then 3 cows wander off. How many cows does the farmer have?",
    "List three uses for a paperclip:",
    "Once upon a time, in a village at the edge of a forest,",
    "Translate to French: 'The cat sleeps on the warm windowsill.'",
    "The quick brown fox",
    "Q: What is 15 times 4?\nA:",
    "import numpy as np\n\n# compute the mean of each row\n",
    "Give me a recipe for pancakes.",
    "Summarize the plot of a detective story in two sentences.",
    "What are the planets of the solar system?",
    "SELECT name, COUNT(*) FROM orders",
    "Dear hiring manager,",
    "In 1969, astronauts",
    "The difference between a list and a tuple in Python is",
    "Tom reads 20 pages a day. How many pages does he read in two weeks?",
    "Here is a haiku about autumn:",
    "Photosynthesis is the process by which",
    "To make a cup of tea, first",
    "The three primary colors are",
    "Write a function in C that reverses a string.",
    "Why do cats purr?",
    "A train leaves at 3 pm travelling 60 miles per hour. How far has it gone by 5:30 pm?",
    "The best way to learn a new language is",
    "Hello! How are you today?",
    "Rain, rain, go away,",
    "My favourite book is",
    "Convert 100 degrees Fahrenheit to Celsius.",
    "The largest ocean on Earth is",
]

SOURCES = ("builtin", "gsm8k")


def bench_prompts(source: str, count: int, data_dir: str | None) -> list[str]:
    if source not in SOURCES:
        raise UserError(f"--prompts must be builtin or gsm8k, got {source!r}")
    if source == "builtin":
        if count > len(BENCH_PROMPTS):
            raise UserError(f"the builtin set has {len(BENCH_PROMPTS)} prompts; use fewer or --prompts gsm8k")
        return BENCH_PROMPTS[:count]
    from ...workers.draft_training.prompts import fewshot_prompts
    from ..tasks.gsm8k import load_gsm8k_split

    test = load_gsm8k_split(data_dir, "test")
    return fewshot_prompts(test, count, 5, seed=1234, shots_from=load_gsm8k_split(data_dir, "train"))
