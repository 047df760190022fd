"""Varied prompts for equivalence tests (self-written)."""

from specdec_eval.cli.bench import BENCH_PROMPTS

# 16 prompts of different kinds and lengths; half of them go through the chat template.
RAW_PROMPTS = BENCH_PROMPTS[:8] + [
    "Count from one to ten: one, two,",
    "The recipe calls for 2 cups of flour for every 3 eggs. With 9 eggs, how many cups of flour are needed? "
    "Let's think step by step.",
]
CHAT_PROMPTS = [
    "What is the boiling point of water at sea level?",
    "Name a mammal that can fly.",
    "Write one sentence about the moon.",
    "If I have 4 apples and eat one, how many are left?",
    "Suggest a name for a pet goldfish.",
    "What does CPU stand for?",
]


def encoded_prompts(engine) -> list[list[int]]:
    raw = [engine.encode(p) for p in RAW_PROMPTS]
    chat = [engine.encode([{"role": "user", "content": p}]) for p in CHAT_PROMPTS]
    return raw + chat
