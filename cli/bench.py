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
    num_prompts: Annotated[int, typer.Option("--num-prompts", help="Prompts at the largest batch size.")] = 32,
    max_new_tokens: Annotated[int, typer.Option("--max-new-tokens", "-n", help="Tokens per prompt.")] = 64,
    batch_sizes: Annotated[
        str, typer.Option("--batch-sizes", help="Comma-separated; batch B serves the prompts B at a time.")
    ] = "1,32",
    batch1_prompts: Annotated[
        int, typer.Option("--batch1-prompts", help="Prompts measured one at a time at batch 1 (it is slow).")
    ] = 4,
    prompts_from: Annotated[
        str,
        typer.Option(
            "--prompts",
            help="builtin (varied self-written prompts) or gsm8k (5-shot GSM8K test "
            "prompts, what the shipped draft head was trained for; needs the data).",
        ),
    ] = "builtin",  # fmt: skip
    data_dir: Annotated[str | None, typer.Option("--data-dir", help="For --prompts gsm8k.")] = None,
    skip_hf: Annotated[bool, typer.Option("--skip-hf", help="Do not measure HF transformers.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of a table.")] = False,
    model: o.Model = o.E.model,
    kv_cache: o.KVCache = o.K.version,
    dtype: o.DType = o.E.dtype,
    device: o.Device = o.E.device,
    device_memory: o.DeviceMemory = None,
    spec: o.Spec = "none",
    draft_len: o.DraftLen = o.S.max_draft_len,
    draft_model: o.DraftModel = o.S.draft_model,
    decode_copy: o.DecodeCopy = o.K.decode_copy,
) -> None:
    """Tokens/s of our engine and of HF transformers `generate` on the same prompts in the same run, at each
    batch size, and their ratios (greedy, EOS ignored so every side produces exactly prompts x max-new-tokens).
    Two rates per side: end to end (prefill included: with 5-shot GSM8K prompts of ~1000 tokens, prefill is most
    of the time at 64 new tokens) and decode (tokens after every request of a batch had its first token, over the
    time after that moment, within the same run: no difference of two noisy runs). Prefix reuse is off on our
    side, so every side prefills every prompt in full.
    With --spec eagle3 it also measures our engine with speculative decoding against our plain decoding, with
    the acceptance length. Peak memory: CUDA max allocated per side; on CPU the process's peak RSS after it.

    Examples:
      specdec-eval bench                                        # batch 1 and 32: ours vs HF
      specdec-eval bench --spec eagle3 --prompts gsm8k --data-dir ../shared/data --json
      specdec-eval bench --batch-sizes 8 --num-prompts 8 --skip-hf
    """
    from ..workers.errors import UserError

    try:
        sizes = sorted({int(b) for b in batch_sizes.split(",")})
    except ValueError:
        raise UserError(f"--batch-sizes wants integers like 1,32, got {batch_sizes!r}") from None
    if sizes[0] < 1 or num_prompts < 1 or batch1_prompts < 1:
        raise UserError("batch sizes, --num-prompts and --batch1-prompts must be positive")
    if prompts_from not in ("builtin", "gsm8k"):
        raise UserError(f"--prompts must be builtin or gsm8k, got {prompts_from!r}")
    if prompts_from == "builtin" and max(num_prompts, sizes[-1]) > len(BENCH_PROMPTS):
        raise UserError(f"the builtin set has {len(BENCH_PROMPTS)} prompts; use fewer or --prompts gsm8k")
    common = dict(model=model, kv_cache=kv_cache, dtype=dtype, device=device, device_memory=device_memory,
                  max_batch_size=max(sizes), decode_copy=decode_copy,
                  # HF has no prefix cache; without this our repeated prompts (the warm-up ones) would skip
                  # their prefill and the end-to-end rate would compare unlike work
                  block_reuse=False)  # fmt: skip
    result = run_bench(
        common, dict(spec=spec, draft_len=draft_len, draft_model=draft_model), sizes, max(num_prompts, sizes[-1]),
        batch1_prompts, max_new_tokens, prompts_from, data_dir, skip_hf,
    )  # fmt: skip
    if as_json:
        print(json.dumps(result))
        return
    for key, value in result.items():
        if key != "rows":
            print(f"{key:>22}: {value}")
    for row in result["rows"]:
        print("  " + "  ".join(f"{k} {v}" for k, v in row.items()))


def bench_prompts(source: str, count: int, data_dir: str | None) -> list[str]:
    if source == "builtin":
        return BENCH_PROMPTS[:count]
    from ..evals.data import load_gsm8k_split
    from ..workers.spec.train.prompts import fewshot_prompts

    test = load_gsm8k_split(data_dir, "test")
    return fewshot_prompts(test, count, 5, seed=1234, shots_from=load_gsm8k_split(data_dir, "train"))


def run_bench(common, spec_cfg, sizes, num_prompts, batch1_prompts, max_new_tokens, source, data_dir, skip_hf):
    from ..workers.config import SamplingParams
    from ..workers.engine import Engine
    from ..workers.hf_reference import FirstTokenClock, build_hf_model, hf_greedy

    engine = Engine(o.engine_config(**common))
    texts = bench_prompts(source, num_prompts, data_dir)
    prompts = [engine.encode(p) for p in texts]
    result: dict = {
        "model": common["model"], "device": engine.device.type, "dtype": str(engine.dtype).removeprefix("torch."),
        "kv_cache": common["kv_cache"], "prompts": source, "max_new_tokens": max_new_tokens,
        "prompt_tokens_mean": round(sum(map(len, prompts)) / len(prompts), 1),
    }  # fmt: skip
    spec_engine_cfg = o.engine_config(**common, **spec_cfg)
    if spec_engine_cfg.spec is not None:
        s = spec_engine_cfg.spec
        result["spec"] = f"{s.algorithm} K={s.max_draft_len} draft={s.draft_model}"

    cycles: list[dict] = []  # acceptance counters of every spec-dec generate call, summed per measurement

    def ours(eng):
        def run(ps, n):
            out = [x.token_ids for x in eng.generate(ps, SamplingParams(max_new_tokens=n, ignore_eos=True))]
            stats = eng.last_stats
            if stats.acceptance:
                cycles.append(stats.acceptance)
            return out, stats.decode_tokens, stats.decode_s

        return run

    sides = {"ours": ours(engine)}
    spec_engine = None
    if spec_engine_cfg.spec is not None:
        spec_engine = Engine(spec_engine_cfg, checkpoint=engine.checkpoint, tokenizer=engine.tokenizer)
        sides["spec"] = ours(spec_engine)
    if not skip_hf:
        hf = build_hf_model(engine.checkpoint, engine.dtype).to(engine.device)
        pad = engine.tokenizer.pad_token_id if engine.tokenizer.pad_token_id is not None else 0

        def hf_run(ps, n):
            clock = FirstTokenClock()
            out = hf_greedy(hf, ps, n, pad, clock)
            decode_s = time.perf_counter() - clock.first_token_time if clock.first_token_time else 0.0
            return out, len(ps) * (n - 1), decode_s

        sides["hf"] = hf_run

    rows = []
    for size in sizes:
        group = prompts[: batch1_prompts if size == 1 else max(size, min(num_prompts, len(prompts)))]
        row: dict = {"batch": size, "prompts": len(group)}
        outputs = {}
        for name, run in sides.items():
            run(group[:1], 2)  # warm up kernels and allocator
            _reset_peak(engine.device)
            stderr.print(f"bench: {name}, batch {size}, {len(group)} prompts x {max_new_tokens} tokens ...")

            cycles.clear()
            outputs[name], elapsed, decode_tokens, decode_s = _timed(run, group, size, max_new_tokens)
            if name == "spec":  # over every chunk of the timed run
                accepted, steps = (sum(c[k] for c in cycles) for k in ("num_accepted_drafts", "num_cycles"))
                row["acceptance_length"] = round(1 + accepted / max(steps, 1), 3)
            row[f"{name}_tok_s"] = round(sum(map(len, outputs[name])) / elapsed, 1)
            row[f"{name}_decode_tok_s"] = round(decode_tokens / max(decode_s, 1e-9), 1)
            row[f"{name}_peak_mib"] = _peak_mib(engine.device)
        if "hf" in sides:
            row["ours_vs_hf"] = round(row["ours_tok_s"] / row["hf_tok_s"], 2)
            row["ours_vs_hf_decode"] = round(row["ours_decode_tok_s"] / row["hf_decode_tok_s"], 2)
            row["ours_identical_to_hf"] = f"{_same(outputs['ours'], outputs['hf'])}/{len(group)}"
        if "spec" in sides:
            row["spec_vs_plain"] = round(row["spec_tok_s"] / row["ours_tok_s"], 2)
            row["spec_vs_plain_decode"] = round(row["spec_decode_tok_s"] / row["ours_decode_tok_s"], 2)
            row["spec_identical_to_plain"] = f"{_same(outputs['spec'], outputs['ours'])}/{len(group)}"
        rows.append(row)
    result["rows"] = rows
    return result


def _timed(run, prompts, batch, n):
    """`prompts` served `batch` at a time, n tokens each: outputs, seconds, and the decode part (tokens and seconds
    after every request of a chunk had its first token), summed over the chunks."""
    t0 = time.perf_counter()
    out, decode_tokens, decode_s = [], 0, 0.0
    for i in range(0, len(prompts), batch):
        tokens, chunk_decode_tokens, chunk_decode_s = run(prompts[i : i + batch], n)
        out += tokens
        decode_tokens += chunk_decode_tokens
        decode_s += chunk_decode_s
    return out, time.perf_counter() - t0, decode_tokens, decode_s


def _reset_peak(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def _peak_mib(device) -> float:
    import resource

    import torch

    if device.type == "cuda":
        return round(torch.cuda.max_memory_allocated(device) / 2**20, 1)
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)  # KiB on Linux


def _same(a: list[list[int]], b: list[list[int]]) -> int:
    return sum(x == y for x, y in zip(a, b, strict=True))
