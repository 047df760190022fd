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
    skip_hf: Annotated[bool, typer.Option("--skip-hf", help="Do not measure HF transformers.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of a table.")] = False,
    model: o.Model = o.E.model,
    kv_cache: o.KVCache = o.K.version,
    dtype: o.DType = o.E.dtype,
    device: o.Device = o.E.device,
    device_memory: o.DeviceMemory = None,
    max_batch_size: o.MaxBatch = o.E.max_batch_size,
    spec: o.Spec = "none",
    draft_len: o.DraftLen = o.S.max_draft_len,
    draft_model: o.DraftModel = o.S.draft_model,
) -> None:
    """Tokens/s of our engine and of HF transformers `generate` on the same prompts in the same run, and their
    ratio (greedy, all prompts batched, EOS ignored so every side produces exactly prompts x max-new-tokens).
    With --spec eagle3 it also measures our engine with speculative decoding, against our plain decoding.

    Examples:
      specdec-eval bench --model smollm2 --num-prompts 32 -n 64
      specdec-eval bench --spec eagle3 --draft-len 3 --skip-hf
    """
    from ..workers.config import SamplingParams
    from ..workers.engine import Engine
    from ..workers.errors import UserError
    from ..workers.hf_reference import build_hf_model, hf_greedy

    if not 1 <= num_prompts <= len(BENCH_PROMPTS):
        raise UserError(f"--num-prompts must be 1..{len(BENCH_PROMPTS)}, got {num_prompts}")
    common = dict(
        model=model, kv_cache=kv_cache, dtype=dtype, device=device, device_memory=device_memory,
        max_batch_size=max_batch_size,
    )  # fmt: skip
    spec_cfg = o.spec_config(spec, draft_len, draft_model)
    engine = Engine(o.engine_config(**common))
    prompts = [engine.encode(p) for p in BENCH_PROMPTS[:num_prompts]]
    result = {
        "model": model, "device": engine.device.type, "dtype": str(engine.dtype).removeprefix("torch."),
        "kv_cache": kv_cache, "num_prompts": num_prompts, "max_new_tokens": max_new_tokens,
    }  # fmt: skip

    def timed(label: str, run) -> tuple[list[list[int]], float]:
        run(prompts[:2], 4)  # warm up kernels and allocator
        stderr.print(f"bench: {label}, {num_prompts} prompts x {max_new_tokens} tokens ...")
        t0 = time.perf_counter()
        tokens = run(prompts, max_new_tokens)
        elapsed = time.perf_counter() - t0
        return tokens, sum(len(t) for t in tokens) / elapsed

    def ours(eng):
        def run(ps, n):
            params = SamplingParams(max_new_tokens=n, ignore_eos=True)
            return [x.token_ids for x in eng.generate(ps, params)]

        return run

    plain_tokens, plain_rate = timed("ours", ours(engine))
    result["ours_tokens_per_s"] = round(plain_rate, 1)
    if spec_cfg is not None:
        spec_engine = Engine(o.engine_config(**common, spec=spec_cfg), checkpoint=engine.checkpoint,
                             tokenizer=engine.tokenizer)  # fmt: skip
        spec_tokens, spec_rate = timed(f"ours + {spec} K={draft_len}", ours(spec_engine))
        acc = spec_engine.last_stats.acceptance
        result.update(
            spec=f"{spec} K={draft_len} draft={draft_model}",
            spec_tokens_per_s=round(spec_rate, 1),
            spec_speedup_vs_plain=round(spec_rate / plain_rate, 2),
            acceptance_length=round(acc["acceptance_length"], 3),
            spec_identical_to_plain=f"{_same(spec_tokens, plain_tokens)}/{num_prompts}",
        )  # fmt: skip
    if not skip_hf:
        hf = build_hf_model(engine.checkpoint, engine.dtype).to(engine.device)
        pad = engine.tokenizer.pad_token_id if engine.tokenizer.pad_token_id is not None else 0
        hf_tokens, hf_rate = timed("Hugging Face transformers generate", lambda ps, n: hf_greedy(hf, ps, n, pad))
        result.update(
            hf_tokens_per_s=round(hf_rate, 1),
            ours_speedup_vs_hf=round(plain_rate / hf_rate, 2),
            identical_to_hf=f"{_same(plain_tokens, hf_tokens)}/{num_prompts}",
        )  # fmt: skip
    if as_json:
        print(json.dumps(result))
        return
    for key, value in result.items():
        print(f"{key:>24}: {value}")


def _same(a: list[list[int]], b: list[list[int]]) -> int:
    return sum(x == y for x, y in zip(a, b, strict=True))
