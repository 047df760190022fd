"""Where our engine's time goes on one `generate` call: `specdec-eval bench --profile`.

Each engine step is split into the parts of "one engine step" (schedule, attention metadata, target forward,
logits, verification, commit and retire), and the target forward further into its matrix products, its attention
(paged attention: the context requests' and the decoding batch's) and the rest of its layers (embedding, norms,
rotary, SiLU, residual adds). What is left of a step's wall time is Python between the parts; what is left of the
call's wall time is the generate loop itself (stats, progress). Steps that carry a context request are prefill
steps, the others decode steps. Also the prefix cache: how many prompt tokens were served from cached blocks.

How: timers wrapped around the executor's parts of one engine (its scheduler, metadata, target, verifier and commit,
as instance attributes) and around the model's `linear` and `paged_attention` functions, for the call only; the
engine runs unchanged otherwise (on CPU every timer reads a finished computation: nothing runs asynchronously).
"""

from __future__ import annotations

import contextlib
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

PARTS = (
    ("schedule", "scheduler: which requests, how many tokens"),
    ("metadata", "attention metadata (positions, slots, masks) and the decode copy's rows"),
    ("matmuls", "target forward: matrix products (q, k, v, o, gate, up, down)"),
    ("attention", "target forward: paged attention (prefill per request, the decoding batch)"),
    ("layers_rest", "target forward: embedding, norms, rotary, SiLU, residual adds"),
    ("logits", "lm_head over the rows verification reads"),
    ("verify", "verification / sampling (greedy argmax, keyed or rejection sampling)"),
    ("commit", "commit loop (stop rules, KV commit and prefix publication) and retire"),
    ("step_python", "the rest of a step: tensors of token ids, rows, the memory check"),
)
KINDS = ("prefill", "decode")


@dataclass
class StepSplit:
    """Seconds per part, per kind of step, and the steps' and the call's wall time."""

    seconds: dict[str, dict[str, float]] = field(default_factory=lambda: {k: defaultdict(float) for k in KINDS})
    steps: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    step_s: dict[str, float] = field(default_factory=lambda: dict.fromkeys(KINDS, 0.0))
    tokens: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))  # tokens forwarded
    call_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"call_s": round(self.call_s, 3), "loop_s": round(self.loop_s, 3)}
        for kind in KINDS:
            parts = {name: round(self.seconds[kind].get(name, 0.0), 3) for name, _ in PARTS}
            out[kind] = {
                "steps": self.steps[kind],
                "tokens": self.tokens[kind],
                "step_s": round(self.step_s[kind], 3),
                "parts_s": parts,
            }
        return out

    @property
    def loop_s(self) -> float:
        """The call's time outside its steps (the generate loop: stats, progress, output assembly)."""
        return self.call_s - sum(self.step_s.values())


class _Clock:
    """Accumulates seconds into the current step's kind; nested parts subtract from their enclosing one."""

    def __init__(self, split: StepSplit) -> None:
        self.split = split
        self.kind = "decode"
        self.quiet = False  # inside a part that keeps its inner parts' time (the logits' own matmul)
        self._stack: list[list[float]] = []  # per open part: [start, child seconds]

    def wrap(self, name: str, fn: Callable, keep_inner: bool = False) -> Callable:
        def timed(*args, **kwargs):
            if self.quiet:
                return fn(*args, **kwargs)
            self.quiet = keep_inner
            self._stack.append([time.perf_counter(), 0.0])
            try:
                return fn(*args, **kwargs)
            finally:
                self.quiet = False
                start, children = self._stack.pop()
                spent = time.perf_counter() - start
                self.split.seconds[self.kind][name] += spent - children
                if self._stack:
                    self._stack[-1][1] += spent

        return timed


class _TimedTarget:
    """The executor's target with its forward and logits timed (the forward's own time is `layers_rest`)."""

    def __init__(self, target, clock: _Clock) -> None:
        self._target = target
        self._forward = clock.wrap("layers_rest", target.__call__)
        self.compute_logits = clock.wrap("logits", target.compute_logits, keep_inner=True)

    def __call__(self, *args, **kwargs):
        return self._forward(*args, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self._target, name)


@contextlib.contextmanager
def profiled(engine) -> Iterator[StepSplit]:
    """Time every step of `engine` inside the block; the engine is back as it was after."""
    from ...workers.model.layers import attention as attention_module
    from ...workers.model.layers import linear as linear_module

    split = StepSplit()
    clock = _Clock(split)
    ex = engine.executor
    saved_attrs = {name: ex.__dict__.get(name) for name in ("target", "verifier", "_commit")}
    saved_sched, saved_prepare = ex.scheduler.__dict__.get("schedule"), ex.meta.__dict__.get("prepare")
    saved_funcs = (linear_module.linear, attention_module.paged_attention)
    original_step = ex.step

    def schedule():
        batch = clock.wrap("schedule", type(ex.scheduler).schedule)(ex.scheduler)
        clock.kind = "prefill" if any(i.is_context for i in batch.items) else "decode"
        split.tokens[clock.kind] += batch.num_tokens
        return batch

    def step(*args, **kwargs):
        t0 = time.perf_counter()
        clock._stack.append([t0, 0.0])
        try:
            return original_step(*args, **kwargs)
        finally:
            _, children = clock._stack.pop()
            spent = time.perf_counter() - t0
            split.steps[clock.kind] += 1
            split.step_s[clock.kind] += spent
            split.seconds[clock.kind]["step_python"] += spent - children

    ex.scheduler.schedule = schedule
    ex.meta.prepare = clock.wrap("metadata", type(ex.meta).prepare.__get__(ex.meta))
    ex.target = _TimedTarget(ex.target, clock)
    ex.verifier = clock.wrap("verify", ex.verifier)
    ex._commit = clock.wrap("commit", type(ex)._commit.__get__(ex))
    ex.step = step
    linear_module.linear = clock.wrap("matmuls", saved_funcs[0])
    attention_module.paged_attention = clock.wrap("attention", saved_funcs[1])
    t0 = time.perf_counter()
    try:
        yield split
    finally:
        split.call_s = time.perf_counter() - t0
        linear_module.linear, attention_module.paged_attention = saved_funcs
        for name, value in saved_attrs.items():
            if value is None:
                ex.__dict__.pop(name, None)
            else:
                setattr(ex, name, value)
        ex.__dict__.pop("step", None)
        for obj, name, value in ((ex.scheduler, "schedule", saved_sched), (ex.meta, "prepare", saved_prepare)):
            if value is None:
                obj.__dict__.pop(name, None)
            else:
                setattr(obj, name, value)


def describe_split(split: dict[str, Any]) -> list[str]:
    """The split as lines: per part, prefill and decode seconds and their share of the call."""
    call = max(split["call_s"], 1e-9)
    lines = [f"  {'part':<14}{'prefill steps':>16}{'decode steps':>16}   what"]
    for name, what in PARTS:
        cells = "".join(f"{split[k]['parts_s'][name]:>9.2f} s {split[k]['parts_s'][name] / call:>4.0%}" for k in KINDS)
        lines.append(f"  {name:<14}{cells}   {what}")
    total = "".join(f"{split[k]['step_s']:>9.2f} s {split[k]['step_s'] / call:>4.0%}" for k in KINDS)
    lines.append(
        f"  {'steps':<14}{total}   {split['prefill']['steps']} prefill and {split['decode']['steps']} "
        f"decode steps, {split['prefill']['tokens']} and {split['decode']['tokens']} tokens forwarded"
    )
    lines.append(
        f"  {'generate loop':<14}{split['loop_s']:>9.2f} s {split['loop_s'] / call:>4.0%}"
        f"{'':>16}   outside the steps (stats, progress)"
    )
    return lines


def run_profile(
    config, prompts_from: str, num_prompts: int, max_new_tokens: int, data_dir: str | None, log=None
) -> dict[str, Any]:
    """Our engine on the plan (`num_prompts` prompts at once, greedy, EOS ignored, `max_new_tokens` each), once to
    warm up on the first prompt, then profiled; the split, the prefix cache's hit rate and the rates."""
    from ...workers.config import SamplingParams
    from ...workers.engine.engine import Engine
    from .prompts import bench_prompts

    say = log or (lambda _msg: None)
    texts = bench_prompts(prompts_from, num_prompts, data_dir)
    engine = Engine.build(config)
    prompts = [engine.encode(t) for t in texts]
    say(
        f"bench --profile: {len(prompts)} prompts (mean {sum(map(len, prompts)) / len(prompts):.0f} tokens) x "
        f"{max_new_tokens} tokens, at once ..."
    )
    # Warm up kernels on a prompt that shares no block with the plan's (its blocks stay cached).
    engine.generate([prompts[0][::-1]], SamplingParams(max_new_tokens=2, ignore_eos=True))
    before = engine.kv_manager.stats()
    with profiled(engine) as split:
        outputs = engine.generate(prompts, SamplingParams(max_new_tokens=max_new_tokens, ignore_eos=True))
    after = engine.kv_manager.stats()
    stats = engine.last_stats
    hit = after["reuse_hit_tokens"] - before["reuse_hit_tokens"]
    queried = after["reuse_queried_tokens"] - before["reuse_queried_tokens"]
    first_done = min(o.stats["latency_s"] for o in outputs)
    return {
        "prompts": prompts_from,
        "num_prompts": len(prompts),
        "prompt_tokens": sum(map(len, prompts)),
        "max_new_tokens": max_new_tokens,
        "block_reuse": config.kv_cache.enable_block_reuse,
        "prefix_hit_tokens": hit,
        "prefix_queried_tokens": queried,
        "prefix_hit_rate": round(hit / queried, 3) if queried else 0.0,
        "elapsed_s": round(stats.elapsed_s, 3),
        "all_started_s": round(stats.all_started_s or 0.0, 3),
        "first_finished_s": round(first_done, 3),
        "output_tokens": stats.num_output_tokens,
        "split": split.to_dict(),
    }


def describe_profile(result: dict[str, Any]) -> list[str]:
    r = result
    lines = [
        f"profile   {r['num_prompts']} {r['prompts']} prompts ({r['prompt_tokens']} tokens) x {r['max_new_tokens']} "
        f"new tokens, all at once, greedy: {r['elapsed_s']:.2f} s ({r['output_tokens'] / r['elapsed_s']:.1f} tok/s "
        f"end to end); every request started at {r['all_started_s']:.2f} s, first finished at "
        f"{r['first_finished_s']:.2f} s",
        f"prefix    block reuse {'on' if r['block_reuse'] else 'off'}: {r['prefix_hit_tokens']} of "
        f"{r['prefix_queried_tokens']} prompt tokens from cached blocks (hit rate {r['prefix_hit_rate']:.0%})",
    ]
    return lines + describe_split(r["split"])
