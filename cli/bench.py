"""`specdec-eval bench`: our engine vs Hugging Face transformers on the same prompts, in the same run."""

from __future__ import annotations

import json
import time
from typing import Annotated

import typer

from . import options as o
from .progress import stderr

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


def bench(
    num_prompts: Annotated[int, typer.Option("--num-prompts", help="Prompts (up to 32 built in).")] = 32,
    max_new_tokens: Annotated[int, typer.Option("--max-new-tokens", "-n", help="Tokens per prompt.")] = 64,
    skip_hf: Annotated[bool, typer.Option("--skip-hf", help="Only measure our engine.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of a table.")] = False,
    model: o.Model = "smollm2",
    kv_cache: o.KVCache = "v1",
    dtype: o.DType = "auto",
    device: o.Device = "auto",
    device_memory: o.DeviceMemory = None,
    max_batch_size: o.MaxBatch = 64,
) -> None:
    """Tokens/s of our engine and of HF transformers `generate` (greedy, all prompts batched, EOS ignored so
    both produce exactly prompts x max-new-tokens), and their ratio.

    Example:  specdec-eval bench --model smollm2 --num-prompts 32 -n 64
    """

    from ..workers.config import SamplingParams
    from ..workers.engine import Engine
    from ..workers.errors import UserError
    from ..workers.hf_reference import build_hf_model, hf_greedy

    if not 1 <= num_prompts <= len(BENCH_PROMPTS):
        raise UserError(f"--num-prompts must be 1..{len(BENCH_PROMPTS)}, got {num_prompts}")
    config = o.engine_config(
        model=model, kv_cache=kv_cache, dtype=dtype, device=device, device_memory=device_memory,
        max_batch_size=max_batch_size,
    )  # fmt: skip
    engine = Engine(config)
    prompts = [engine.encode(p) for p in BENCH_PROMPTS[:num_prompts]]
    sampling = SamplingParams(max_new_tokens=max_new_tokens, ignore_eos=True)
    engine.generate(prompts[:2], SamplingParams(max_new_tokens=4, ignore_eos=True))  # warm up kernels
    stderr.print(f"bench: ours, {num_prompts} prompts x {max_new_tokens} tokens ...")
    t0 = time.perf_counter()
    ours = engine.generate(prompts, sampling)
    ours_s = time.perf_counter() - t0
    total = sum(len(x.token_ids) for x in ours)
    result = {
        "model": model, "device": engine.device.type, "dtype": str(engine.dtype).removeprefix("torch."),
        "kv_cache": kv_cache, "num_prompts": num_prompts, "max_new_tokens": max_new_tokens,
        "ours_tokens_per_s": round(total / ours_s, 1), "ours_s": round(ours_s, 2),
    }  # fmt: skip
    if not skip_hf:
        hf = build_hf_model(engine.checkpoint, engine.dtype).to(engine.device)
        pad = engine.tokenizer.pad_token_id if engine.tokenizer.pad_token_id is not None else 0
        hf_greedy(hf, prompts[:2], 4, pad)
        stderr.print("bench: Hugging Face transformers generate ...")
        t0 = time.perf_counter()
        theirs = hf_greedy(hf, prompts, max_new_tokens, pad)
        hf_s = time.perf_counter() - t0
        hf_total = sum(len(x) for x in theirs)
        same = sum(a.token_ids == b for a, b in zip(ours, theirs, strict=True))
        result.update(
            hf_tokens_per_s=round(hf_total / hf_s, 1), hf_s=round(hf_s, 2),
            speedup_vs_hf=round((total / ours_s) / (hf_total / hf_s), 2),
            identical_outputs=f"{same}/{num_prompts}",
        )  # fmt: skip
    if as_json:
        print(json.dumps(result))
        return
    for key, value in result.items():
        print(f"{key:>20}: {value}")
