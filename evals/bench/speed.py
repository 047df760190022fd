"""The speed benchmark behind `specdec-eval bench`: our engine, Hugging Face transformers `generate` and our engine with
speculative decoding on the same prompts, at each batch size, in interleaved rounds, with this machine's GEMM peak and
memory bandwidth measured in the same run and each plain side's prefill and decode rates as fractions of them (the
roofline).

One measurement of a side: a warm-up call (one prompt, 2 tokens), then the batch's prompts served `batch` at a
time, greedy with EOS ignored, so every side produces exactly prompts x max_new_tokens tokens. Per measurement:
the end-to-end rate (prefill included), the decode rate (tokens after every request of a chunk had its first
token, over the time after that moment, within the same call), the prefill phase (the time before that moment)
and the peak memory (CUDA: max allocated since the warm-up; CPU: the process's peak RSS, which only grows).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from ...errors import UserError
from ...workers.config import EngineConfig
from . import roofline
from .budget import bench_device_memory
from .estimate import ModelBytes, describe_duration, estimate_bench
from .hardware import BANDWIDTH_MIB, GEMM_SIZE, measure_limits_apart
from .prompts import BENCH_PROMPTS, SOURCES, bench_prompts
from .rounds import MIN_ROUNDS, interleave, ratio_spread, spread_of, unstable_line

# (name in the report, numerator side, denominator side, rate): the ratios `bench` has always printed.
RATIOS = (
    ("ours_vs_hf", "ours", "hf", "tok_s"),
    ("ours_vs_hf_decode", "ours", "hf", "decode_tok_s"),
    ("spec_vs_plain", "spec", "ours", "tok_s"),
    ("spec_vs_plain_decode", "spec", "ours", "decode_tok_s"),
    ("ours_vs_vllm", "ours", "vllm", "tok_s"),  # vLLM's decode phase is not seen from outside: end to end only
)
PLAIN_SIDES = ("ours", "hf")  # the roofline formulas describe plain decoding (one token per request per step)


@dataclass(frozen=True)
class BenchPlan:
    """The defaults finish `bench --spec eagle3 --prompts gsm8k` (five-shot prompts of ~1030 tokens) in ~10 min on
    an idle 2-core CPU (README): at batch 32 and 3 rounds it takes ~27 min at the README's rates, nearly all of it
    prefill (HF's alone ~2.8 min per round). Batch 16 keeps a batched row (every ratio of batch 32, half its
    prefill); 2 rounds still give each ratio a spread and the UNSTABLE warning (--rounds 3 when a machine is
    noisy); 2 prompts at batch 1 (all ~1030 tokens, measured one at a time, so two give the rate four did) halve
    the slowest row per token."""

    batch_sizes: tuple[int, ...] = (1, 16)
    num_prompts: int = 16  # prompts at every batch size above 1 (at least the largest batch)
    batch1_prompts: int = 2  # prompts measured one at a time at batch 1 (it is slow)
    max_new_tokens: int = 64
    prompts: str = "builtin"  # builtin | gsm8k
    data_dir: str | None = None
    skip_hf: bool = False
    rounds: int = 2
    vllm: bool = False  # a plain vLLM server as a side (`vllm_side`)
    gemm_size: int = GEMM_SIZE  # hardware probe sizes (tests shrink them)
    bandwidth_mib: int = BANDWIDTH_MIB

    def __post_init__(self) -> None:
        if not self.batch_sizes or min(self.batch_sizes) < 1 or self.num_prompts < 1 or self.batch1_prompts < 1:
            raise UserError("batch sizes, --num-prompts and --batch1-prompts must be positive")
        if self.max_new_tokens < 2:
            raise UserError(f"--max-new-tokens must be at least 2 (one decode token), got {self.max_new_tokens}")
        if self.rounds < MIN_ROUNDS:
            raise UserError(f"--rounds must be at least {MIN_ROUNDS} (a spread needs two), got {self.rounds}")
        if self.prompts not in SOURCES:
            raise UserError(f"--prompts must be builtin or gsm8k, got {self.prompts!r}")
        if self.prompts == "builtin" and self.prompt_count > len(BENCH_PROMPTS):
            raise UserError(f"the builtin set has {len(BENCH_PROMPTS)} prompts; use fewer or --prompts gsm8k")

    @property
    def prompt_count(self) -> int:
        return max(self.num_prompts, max(self.batch_sizes))

    def group(self, prompts: list, batch: int) -> list:
        """The prompts measured at `batch`: the first batch1_prompts at batch 1, all of them above."""
        return prompts[: self.batch1_prompts] if batch == 1 else prompts


class Chunk(NamedTuple):
    """What a side returns for one chunk of prompts."""

    outputs: list[list[int]]
    decode_tokens: int
    decode_s: float
    acceptance: tuple[int, int] | None = None  # spec-dec: (accepted drafts, cycles)


Side = Callable[[list[list[int]], int], Chunk]  # (prompt token ids, new tokens) -> Chunk


@dataclass
class Measurement:
    outputs: list[list[int]]
    elapsed_s: float
    decode_tokens: int
    decode_s: float
    peak_mib: float
    accepted: int = 0
    cycles: int = 0

    @property
    def tok_s(self) -> float:
        return sum(map(len, self.outputs)) / self.elapsed_s

    @property
    def decode_tok_s(self) -> float:
        return self.decode_tokens / max(self.decode_s, 1e-9)

    @property
    def prefill_s(self) -> float:
        return self.elapsed_s - self.decode_s


def measure(side: Side, prompts: list[list[int]], batch: int, n: int, device) -> Measurement:
    """One measurement: warm up, then `prompts` served `batch` at a time, n tokens each, summed over the chunks."""
    side(prompts[:1], 2)  # warm up kernels and allocator
    _reset_peak(device)
    t0 = time.perf_counter()
    m = Measurement([], 0.0, 0, 0.0, 0.0)
    for i in range(0, len(prompts), batch):
        chunk = side(prompts[i : i + batch], n)
        m.outputs += chunk.outputs
        m.decode_tokens += chunk.decode_tokens
        m.decode_s += chunk.decode_s
        if chunk.acceptance is not None:
            m.accepted, m.cycles = m.accepted + chunk.acceptance[0], m.cycles + chunk.acceptance[1]
    m.elapsed_s = time.perf_counter() - t0
    m.peak_mib = _peak_mib(device)
    return m


def plain_rates(
    roof: roofline.Roofline, m: Measurement, prompts: list[list[int]], batch: int, n: int
) -> roofline.PhaseRates:
    """A plain side's measurement against the limits: every request of a chunk makes one token per step."""
    steps = m.decode_tokens / min(batch, len(prompts))
    context = sum(map(len, prompts)) / len(prompts) + n / 2
    return roof.rates([len(p) for p in prompts], m.prefill_s, steps, m.decode_tokens, context, m.decode_s)


def summarise_row(
    batch: int, prompts: list[list[int]], n: int, results: dict[str, list[Measurement]], roof: roofline.Roofline | None
) -> dict[str, Any]:
    """One batch size's row: per side the median rates over rounds; per ratio the median of the per-round ratios
    with its spread; output identity across sides (first round) and across rounds; the plain sides' fractions of
    the hardware limits."""
    row: dict[str, Any] = {"batch": batch, "prompts": len(prompts)}
    spreads: dict[str, dict] = {}
    if "spec" in results:  # over every round (greedy: each round accepts the same drafts)
        accepted, cycles = (sum(getattr(m, k) for m in results["spec"]) for k in ("accepted", "cycles"))
        row["acceptance_length"] = round(1 + accepted / max(cycles, 1), 3)
    for name, ms in results.items():
        for rate in ("tok_s", "decode_tok_s"):
            s = spread_of([getattr(m, rate) for m in ms])
            row[f"{name}_{rate}"] = round(s.median, 1)
            spreads[f"{name}_{rate}"] = s.to_dict(1)
        row[f"{name}_peak_mib"] = max(m.peak_mib for m in ms)
    unstable = []
    for ratio, num, den, rate in RATIOS:
        if num in results and den in results:
            s = ratio_spread([getattr(m, rate) for m in results[num]], [getattr(m, rate) for m in results[den]])
            row[ratio] = round(s.median, 3) if s else None  # the same digits as its spread, so low <= median <= high
            if s is not None:
                spreads[ratio] = s.to_dict(3)
                line = unstable_line(f"batch {batch} {ratio}", s)
                unstable += [line] if line else []
    first = {name: ms[0].outputs for name, ms in results.items()}
    if "hf" in first:
        row["ours_identical_to_hf"] = f"{_same(first['ours'], first['hf'])}/{len(prompts)}"
    if "vllm" in first:
        row["ours_identical_to_vllm"] = f"{_same(first['ours'], first['vllm'])}/{len(prompts)}"
    if "spec" in first:
        row["spec_identical_to_plain"] = f"{_same(first['spec'], first['ours'])}/{len(prompts)}"
    row["rounds_identical"] = all(m.outputs == first[name] for name, ms in results.items() for m in ms)
    row["outputs_sha256"] = {name: outputs_digest(out) for name, out in first.items()}
    if roof is not None:
        for name in (s for s in PLAIN_SIDES if s in results):
            per_round = [plain_rates(roof, m, prompts, batch, n).to_dict() for m in results[name]]
            for key in per_round[0]:
                row[f"{name}_{key}"] = round(statistics.median(r[key] for r in per_round), 3)
    row["spreads"] = spreads
    row["unstable"] = unstable
    return row


def outputs_digest(outputs: list[list[int]]) -> str:
    """A short fingerprint of a side's token ids, to compare outputs across runs and commits."""
    return hashlib.sha256(json.dumps(outputs).encode()).hexdigest()[:16]


def _same(a: list[list[int]], b: list[list[int]]) -> int:
    return sum(x == y for x, y in zip(a, b, strict=True))


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


def measure_rounds(
    sides: dict[str, Side],
    group: list[list[int]],
    batch: int,
    plan: BenchPlan,
    device,
    say: Callable[[str], None],
    expected: dict[str, float],
) -> dict[str, list[Measurement]]:
    """Every side at one batch size, interleaved: round 1 (ours, spec, hf), round 2 (ours, spec, hf), ...
    expected: each side's estimated seconds per measurement, shown in its progress line."""
    n = plan.max_new_tokens

    def before(r: int, name: str) -> None:
        say(
            f"bench: round {r + 1}/{plan.rounds}, {name}, batch {batch}, {len(group)} prompts x {n} tokens "
            f"({describe_duration(expected[name])}) ..."
        )

    def one(side: Side) -> Callable[[int], Measurement]:
        return lambda _round: measure(side, group, batch, n, device)

    return interleave({name: one(side) for name, side in sides.items()}, plan.rounds, before)


def run_bench(
    base: EngineConfig,
    spec: EngineConfig | None,
    plan: BenchPlan,
    log: Callable[[str], None] | None = None,
    estimate_only: bool = False,
) -> dict[str, Any]:
    """The whole benchmark. base: our plain engine's configuration; spec: the spec-dec one (None: no spec side). Both
    should have block reuse off: HF has no prefix cache, and a prompt seen in the warm-up would skip its prefill on our
    side only (a vLLM side then runs without prefix caching too). An engine without a device memory budget gets what
    the plan needs. Before the rounds it says how long they will take; estimate_only: stop there (the result then has
    the estimate and no rows)."""
    from ...workers.loading.checkpoint import load_checkpoint
    from ...workers.loading.tokenizer import encode_any
    from .sides import build_sides

    say = log or (lambda _msg: None)
    started = time.perf_counter()
    checkpoint = load_checkpoint(base.model)
    tokenizer = checkpoint.load_tokenizer()
    texts = bench_prompts(plan.prompts, plan.prompt_count, plan.data_dir)
    prompts = [encode_any(tokenizer, p) for p in texts]
    base, spec = (_with_budget(c, checkpoint.config, prompts, plan, say) for c in (base, spec))
    sides, engine = build_sides(base, spec, plan.skip_hf, checkpoint, tokenizer)
    with contextlib.ExitStack() as stack:
        if plan.vllm:
            from .vllm_side import vllm_side

            say("bench: starting a plain vLLM server (35-100 s) ...")
            sides["vllm"] = stack.enter_context(vllm_side(base.kv_cache.enable_block_reuse))
        return _run_sides(base, spec, plan, sides, engine, prompts, say, estimate_only, started)


def _run_sides(
    base: EngineConfig,
    spec: EngineConfig | None,
    plan: BenchPlan,
    sides: dict[str, Side],
    engine,
    prompts: list[list[int]],
    say: Callable[[str], None],
    estimate_only: bool,
    started: float,
) -> dict[str, Any]:
    """`run_bench` once every side is up (a vLLM server included): limits, calibration, rounds, rows."""
    result: dict[str, Any] = {
        "model": base.model,
        "device": engine.device.type,
        "dtype": str(engine.dtype).removeprefix("torch."),
        "kv_cache": base.kv_cache.version,
        "prompts": plan.prompts,
        "max_new_tokens": plan.max_new_tokens,
        "prompt_tokens_mean": round(sum(map(len, prompts)) / len(prompts), 1),
        "rounds": plan.rounds,
        "device_memory_gib": round(engine.memory.total_bytes / 2**30, 2),
    }
    if spec is not None and spec.spec is not None:
        s = spec.spec
        result["spec"] = f"{s.algorithm} K={s.max_draft_len} draft={s.draft_model}"
    say(f"bench: measuring this machine's limits on {engine.device} ...")
    probe_started = time.perf_counter()
    limits = measure_limits_apart(engine.device, plan.gemm_size, plan.bandwidth_mib)
    probe_s = time.perf_counter() - probe_started
    say("bench: calibrating each side on one prompt ...")
    draft_len = spec.spec.max_draft_len if spec is not None and spec.spec is not None else 0
    size = ModelBytes(engine.weights_bytes, engine.kv_layout.bytes_per_token)
    estimate = estimate_bench(sides, prompts, plan, size, draft_len, probe_s)
    result["estimate"] = estimate
    say(
        f"bench: expected duration {describe_duration(estimate['expected_s'])} from here "
        f"({estimate['measurements']} measurements; calibrated on one prompt per side)"
    )
    if estimate_only:
        return result
    rows = []
    for size in sorted(set(plan.batch_sizes)):
        group = plan.group(prompts, size)
        expected = estimate["per_measurement_s"][str(size)]
        rows.append((size, group, measure_rounds(sides, group, size, plan, engine.device, say, expected)))
    # The limits are the best this machine showed during the bench: probed before the rounds and after them.
    limits = limits.best(measure_limits_apart(engine.device, plan.gemm_size, plan.bandwidth_mib))
    dtype_bytes = next(engine.model.parameters()).element_size()
    roof = roofline.Roofline(engine.model_config, dtype_bytes, limits)
    result["hardware"] = limits.to_dict()
    result["formulas"] = roofline.FORMULAS
    result["rows"] = [summarise_row(size, group, plan.max_new_tokens, m, roof) for size, group, m in rows]
    result["unstable"] = [line for row in result["rows"] for line in row["unstable"]]
    result["elapsed_s"] = round(time.perf_counter() - started, 1)
    return result


def _with_budget(
    config: EngineConfig | None, model, prompts: list[list[int]], plan: BenchPlan, say: Callable[[str], None]
) -> EngineConfig | None:
    """The config with the plan's memory budget when it has none (`budget`)."""
    if config is None or config.device_memory is not None:
        return config
    budget = bench_device_memory(config, model, max(map(len, prompts)), plan.max_new_tokens)
    say(
        f"bench: {budget / 2**30:.2f} GiB per engine{' (spec-dec)' if config.spec else ''}: "
        f"what {config.max_batch_size} prompts of up to {max(map(len, prompts))} tokens need (--device-memory)"
    )
    return replace(config, device_memory=budget)
