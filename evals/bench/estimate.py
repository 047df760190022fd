"""How long `bench` will take, printed before the rounds start: each side calibrated on one prompt, and a
first-order model of the plan built on what the calibration measured (no constant of any machine).

Calibration: each side generates CALIBRATION_TOKENS tokens for the first prompt alone (it also warms the side up).
That gives, per side, the prefill time per prompt token, the decode time per step at batch 1 and, for spec-dec,
the tokens one step makes (the acceptance length). One measurement of the plan (a warm-up, then the prompts
`batch` at a time) is then modelled as
- prefill: the chunk's prompt tokens x the side's prefill time per token (prefill is compute-bound: linear in
  tokens);
- decode: steps x the step time at batch b. A step at batch 1 reads the weights (W bytes) and one request's KV
  cache (KV bytes at the chunk's mean context); each further request adds its KV reads, which scale the batch-1
  time by bytes, and its tokens' compute, priced at the side's prefill time per token:
      step(b) = step(1) x (W + b x KV) / (W + KV) + (b - 1) x q x prefill time per token
  q: tokens computed per request per step (1 for plain decoding, K + 1 when verifying K drafts).
It leaves out what it cannot see from batch 1 (HF's cache concatenation grows with the batch); README records how
close it came. Pure Python: tested with made-up calibrations.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .speed import BenchPlan

CALIBRATION_TOKENS = 16  # 15 decode steps at batch 1: a second or two per side on a 2-core CPU


@dataclass(frozen=True)
class Calibration:
    """One side's run on one prompt at batch 1."""

    prompt_tokens: int
    elapsed_s: float
    decode_tokens: int  # tokens after the first
    decode_s: float
    tokens_per_step: float = 1.0  # spec-dec: 1 + accepted drafts per cycle
    computed_per_step: int = 1  # tokens the target computes per request per step (K + 1 for spec-dec)

    @property
    def prefill_s_per_token(self) -> float:
        return max(self.elapsed_s - self.decode_s, 0.0) / max(self.prompt_tokens, 1)

    @property
    def step_s(self) -> float:
        steps = self.decode_tokens / self.tokens_per_step
        return self.decode_s / steps if steps > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "prefill_tok_s": round(1 / max(self.prefill_s_per_token, 1e-9), 1),
            "step_ms": round(1000 * self.step_s, 1),
            "tokens_per_step": round(self.tokens_per_step, 2),
        }


@dataclass(frozen=True)
class ModelBytes:
    """What a decode step reads besides compute: the weights and the KV cache per token of context."""

    weights: int
    kv_per_token: int


def step_s(cal: Calibration, size: ModelBytes, batch: int, context: float) -> float:
    """One decode step at `batch` requests of mean `context` tokens (the formula in the module docstring)."""
    kv = context * size.kv_per_token
    scaled = cal.step_s * (size.weights + batch * kv) / (size.weights + kv)
    return scaled + (batch - 1) * cal.computed_per_step * cal.prefill_s_per_token


def measurement_s(cal: Calibration, size: ModelBytes, prompt_lens: Sequence[int], batch: int, n: int) -> float:
    """One measurement as `speed.measure` runs it: a warm-up (first prompt, 2 tokens), then the prompts
    `batch` at a time, n tokens each."""
    total = prompt_lens[0] * cal.prefill_s_per_token + step_s(cal, size, 1, prompt_lens[0])
    for i in range(0, len(prompt_lens), batch):
        chunk = prompt_lens[i : i + batch]
        context = statistics.fmean(chunk) + n / 2
        steps = (n - 1) / cal.tokens_per_step
        total += sum(chunk) * cal.prefill_s_per_token + steps * step_s(cal, size, len(chunk), context)
    return total


def describe_duration(seconds: float) -> str:
    """'~40 s', '~7 min', '~1 h 05 min'."""
    if seconds < 90:
        return f"~{seconds:.0f} s"
    minutes = round(seconds / 60)
    return f"~{minutes} min" if minutes < 60 else f"~{minutes // 60} h {minutes % 60:02d} min"


def calibrate(
    side: Callable, prompt: list[int], computed_per_step: int, tokens: int = CALIBRATION_TOKENS
) -> Calibration:
    """One side on one prompt at batch 1, after a short warm-up (its first call pays one-off costs)."""
    side([prompt[:16]], 2)
    t0 = time.perf_counter()
    chunk = side([prompt], tokens)
    elapsed = time.perf_counter() - t0
    per_step = 1.0
    if chunk.acceptance is not None and chunk.acceptance[1] > 0:
        per_step = 1 + chunk.acceptance[0] / chunk.acceptance[1]
    return Calibration(len(prompt), elapsed, chunk.decode_tokens, chunk.decode_s, per_step, computed_per_step)


def estimate_bench(
    sides: dict[str, Callable],
    prompts: list[list[int]],
    plan: BenchPlan,
    size: ModelBytes,
    draft_len: int,
    probe_s: float,
) -> dict[str, Any]:
    """Calibrate every side, then the expected seconds of each measurement and of the rest of the bench (every
    round of every batch size, and the closing hardware probe, as long as the first one took)."""
    tokens = min(CALIBRATION_TOKENS, plan.max_new_tokens)  # a smaller plan is not calibrated longer than it runs
    cals = {
        name: calibrate(side, prompts[0], 1 + draft_len if name == "spec" else 1, tokens)
        for name, side in sides.items()
    }
    lens = [len(p) for p in prompts]
    per: dict[str, dict[str, float]] = {}
    for batch in sorted(set(plan.batch_sizes)):
        group = [len(p) for p in plan.group(prompts, batch)]
        per[str(batch)] = {name: measurement_s(c, size, group, batch, plan.max_new_tokens) for name, c in cals.items()}
    expected = probe_s + plan.rounds * sum(s for row in per.values() for s in row.values())
    return {
        "expected_s": round(expected, 1),
        "measurements": plan.rounds * len(per) * len(sides),
        "per_measurement_s": {b: {k: round(v, 1) for k, v in row.items()} for b, row in per.items()},
        "calibration": {name: c.to_dict() for name, c in cals.items()},
        "prompt_tokens_max": max(lens),
    }
