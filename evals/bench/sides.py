"""The sides `bench` compares, each a callable (prompt token ids, new tokens) -> Chunk: our engine, our engine with
speculative decoding (same checkpoint and tokenizer), and Hugging Face transformers `generate` on the same weights."""

from __future__ import annotations

import time

from ...workers.config import EngineConfig, SamplingParams
from ...workers.engine.engine import Engine
from .speed import Chunk, Side


def engine_side(engine: Engine) -> Side:
    def run(prompts: list[list[int]], n: int) -> Chunk:
        outputs = engine.generate(prompts, SamplingParams(max_new_tokens=n, ignore_eos=True))
        stats = engine.last_stats
        acceptance = None
        if stats.acceptance:
            acceptance = (stats.acceptance["num_accepted_drafts"], stats.acceptance["num_cycles"])
        return Chunk([o.token_ids for o in outputs], stats.decode_tokens, stats.decode_s, acceptance)

    return run


def hf_side(engine: Engine) -> Side:
    """HF `generate` on our engine's checkpoint, dtype and device; decode time from its first-token clock."""
    from ...workers.loading.hf_reference import FirstTokenClock, build_hf_model, hf_greedy

    hf = build_hf_model(engine.checkpoint, engine.dtype).to(engine.device)
    pad = engine.tokenizer.pad_token_id if engine.tokenizer.pad_token_id is not None else 0

    def run(prompts: list[list[int]], n: int) -> Chunk:
        clock = FirstTokenClock()
        outputs = hf_greedy(hf, prompts, n, pad, clock)
        decode_s = time.perf_counter() - clock.first_token_time if clock.first_token_time else 0.0
        return Chunk(outputs, len(prompts) * (n - 1), decode_s)

    return run


def build_sides(
    base: EngineConfig, spec: EngineConfig | None, skip_hf: bool, checkpoint=None, tokenizer=None
) -> tuple[dict[str, Side], Engine]:
    """The sides in measurement order (ours, spec, hf), and our plain engine; checkpoint and tokenizer: already
    loaded ones to share (else base.model's)."""
    engine = Engine.build(base, checkpoint=checkpoint, tokenizer=tokenizer)
    sides = {"ours": engine_side(engine)}
    if spec is not None and spec.spec is not None:
        sides["spec"] = engine_side(Engine.build(spec, checkpoint=engine.checkpoint, tokenizer=engine.tokenizer))
    if not skip_hf:
        sides["hf"] = hf_side(engine)
    return sides, engine
