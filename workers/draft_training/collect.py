"""Collect training data: the target generates greedy answers through the engine, and a feature tap records,
for every position it computes, the three captured layers (the draft's `fc` input) and the target's argmax.

One shard per chunk of prompts, written atomically: a collection that stops part-way resumes at the first
missing shard. Prefix reuse is off (a reused block would have no recorded features).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import torch

from ..config import SamplingParams
from .prompts import STOP

LABEL_CHUNK = 256  # rows of full-vocabulary logits computed at a time (49k columns each for SmolLM2)


class FeatureRecorder:
    """A FeatureTap (the engine step records into it): keeps fp16 features and int32 labels per request and position.
    A request recomputed after preemption records the same positions again; the last recording wins."""

    def __init__(self, capture_layers: tuple[int, ...]) -> None:
        self.capture_layers = tuple(capture_layers)
        self.chunks: dict[int, dict[int, tuple[torch.Tensor, torch.Tensor]]] = {}

    def record(self, items, meta, input_ids, hidden, captured, model) -> None:
        features = torch.cat(captured, dim=-1).to(torch.float16).cpu()
        chunks = range(0, len(hidden), LABEL_CHUNK)
        labels = torch.cat([model.compute_logits(hidden[i : i + LABEL_CHUNK]).argmax(-1) for i in chunks])
        labels = labels.to(torch.int32).cpu()
        starts = meta.query_start.tolist()
        for r, item in enumerate(items):
            s, e = starts[r], starts[r + 1]
            self.chunks.setdefault(item.request.index, {})[item.start] = (features[s:e], labels[s:e])

    def take(self, index: int, num_positions: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Features [n, 3H] and labels [n] for positions 0..n-1 of the request of prompt `index` (one generate call
        per recorder)."""
        chunks = self.chunks.pop(index)
        width = next(iter(chunks.values()))[0].shape[1]
        features = torch.empty(num_positions, width, dtype=torch.float16)
        labels = torch.full((num_positions,), -1, dtype=torch.int32)
        for start in sorted(chunks):
            f, lab = chunks[start]
            end = min(start + len(f), num_positions)
            features[start:end], labels[start:end] = f[: end - start], lab[: end - start]
        if bool((labels < 0).any()):
            raise RuntimeError(f"prompt {index}: some positions were never computed (prefix reuse on?)")
        return features, labels


def collect_shards(
    engine,
    prompts: list[str],
    out_dir: Path,
    capture_layers: tuple[int, ...],
    shard_size: int,
    max_new_tokens: int,
    progress: Callable[[int, int, int], None] | None = None,
) -> list[Path]:
    """Generate and record every prompt; returns the shard paths. progress(done, total, tokens so far)."""
    if engine.config.kv_cache.enable_block_reuse:
        raise ValueError("collect with block reuse off: reused prefixes have no recorded features")
    out_dir.mkdir(parents=True, exist_ok=True)
    sampling = SamplingParams(max_new_tokens=max_new_tokens, stop=STOP)
    paths, tokens = [], 0
    for first in range(0, len(prompts), shard_size):
        path = out_dir / f"shard-{first // shard_size:05d}.pt"
        paths.append(path)
        if path.exists():
            tokens += sum(len(s["tokens"]) for s in torch.load(path, weights_only=True)["sequences"])
        else:
            batch = prompts[first : first + shard_size]
            recorder = FeatureRecorder(capture_layers)
            with engine.executor.tap(recorder):
                outputs = engine.generate(batch, sampling)
            sequences = []
            for out in outputs:
                ids = list(out.prompt_token_ids) + list(out.token_ids)
                features, labels = recorder.take(out.index, len(ids) - 1)  # the last token is never fed
                sequences.append(
                    {
                        "tokens": torch.tensor(ids, dtype=torch.int32),
                        "prompt_len": len(out.prompt_token_ids),
                        "features": features,
                        "labels": labels,
                    }
                )
                tokens += len(ids)
            tmp = path.with_suffix(".tmp")
            torch.save({"sequences": sequences}, tmp)
            os.replace(tmp, path)
        if progress is not None:
            progress(min(first + shard_size, len(prompts)), len(prompts), tokens)
    return paths
