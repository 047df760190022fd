"""The verdict benchmark behind `specdec-eval bench --verdict`: the wall time of a whole verdict (what `specdec-eval
run` does: evaluate, record, gates) on a subset of GSM8K, for three ways of getting it:

- plain: one run without speculative decoding (the cost a verdict is measured against);
- spec+separate: a spec-dec run plus its lossless baseline as a second full evaluation (`--baseline separate`);
- spec+paired: a spec-dec run whose baseline decodes from the same prefill (paired decoding, `run`'s default),
  including the audit of its twins on a second engine with no spec worker: its engine's
  construction and its checks are in the side's wall time, and each round's audit seconds are reported apart;
- spec+scored (in place of the two above for a sampled task, `--task gsm8k_sampled`, on a sampler judged in
  distribution, `--spec-sampling rejection`): the spec-dec run and the plain engine's scoring of its outputs,
  no baseline decoded.

Each side runs into its own fresh temporary runs folder, so no baseline is found and reused between sides or rounds; the
sides are interleaved in rounds and each ratio to the plain side is the median of its per-round ratios. The plain run's
prefill and decode are compared with this machine's limits, measured in the same command.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...errors import UserError
from ...results.run_summary import RunSummary, Verdict
from ...workers.config import EngineConfig
from ..gates.lossless_gate import GATE as LOSSLESS
from ..gates.registry import gate_keys
from ..pipeline.backends import RunTarget, make_backend
from ..pipeline.run import run
from ..run_identity import baseline_config
from ..run_types import EvalOptions, RunPlan
from ..tasks.registry import parse_tasks, source_for
from . import roofline
from .hardware import BANDWIDTH_MIB, GEMM_SIZE, measure_limits_apart
from .rounds import MIN_ROUNDS, interleave, ratio_spread, spread_of, unstable_line

PLAIN, SEPARATE, PAIRED = "plain", "spec+separate", "spec+paired"
SCORED = "spec+scored"  # a sampled task on a sampler judged in distribution: the run, then the plain engine's scoring
# What a verdict may cost: (side, the side it is compared with, the largest ratio of their wall times). The paired
# greedy verdict is our engine's (a server cannot pair); the sampled ones are the run plus its scoring, locally and
# against servers (`endpoint_verdict`).
GUARDS = {PAIRED: (PLAIN, 1.45), SCORED: (PLAIN, 1.4), "spec+scored, sampled": ("plain, sampled", 1.4)}


@dataclass(frozen=True)
class VerdictBenchPlan:
    task: str = "gsm8k"
    docs: int = 64
    seed: int = 0  # of the random subset
    data_dir: str | None = None
    max_output_len: int | None = None  # None: the task's own (GSM8K 256)
    rounds: int = 3
    work_dir: str | None = None  # where the temporary runs folders go (None: the system's temp folder)
    gemm_size: int = GEMM_SIZE
    bandwidth_mib: int = BANDWIDTH_MIB

    def __post_init__(self) -> None:
        if self.docs < 1:
            raise UserError(f"--docs must be at least 1, got {self.docs}")
        if self.rounds < MIN_ROUNDS:
            raise UserError(f"--rounds must be at least {MIN_ROUNDS} (a spread needs two), got {self.rounds}")
        if self.max_output_len is not None and self.max_output_len < 1:
            raise UserError(f"--max-output-len must be at least 1, got {self.max_output_len}")

    def options(self) -> tuple[EvalOptions, str]:
        """The evaluation every side runs, and how its documents were chosen (in words)."""
        tasks = parse_tasks(self.task)
        common = dict(tasks=tasks, data_dir=self.data_dir, limit=self.docs, max_output_len=self.max_output_len)
        note = f"a seeded random subset of {self.docs} documents (seed {self.seed})"
        return EvalOptions(**common, sample="random", seed=self.seed), note


class PhaseClock:
    """A progress callback that keeps, per `generate` call, its last stats and the step count at the moment
    every request had its first token (where the prefill phase ends and pure decoding begins)."""

    def __init__(self, then: Callable | None = None) -> None:
        self.calls: list[dict[str, Any]] = []
        self._stats: Any = None
        self.then = then

    def __call__(self, done: int, total: int, stats) -> None:
        if stats is not self._stats:  # a new generate call
            self._stats = stats
            self.calls.append({"stats": stats, "steps_at_all_started": None})
        call = self.calls[-1]
        if call["steps_at_all_started"] is None and stats.all_started_s is not None:
            call["steps_at_all_started"] = stats.num_steps
        if self.then is not None:
            self.then(done, total, stats)

    def phases(self) -> dict[str, float]:
        """Summed over the calls: requests, prompt and output tokens, prefill/decode seconds, decode tokens/steps."""
        out = dict.fromkeys(
            ("requests", "prompt_tokens", "output_tokens", "prefill_s", "decode_s", "decode_tokens", "decode_steps"),
            0.0,
        )
        for call in self.calls:
            s = call["stats"]
            out["requests"] += s.num_requests
            out["prompt_tokens"] += s.num_prompt_tokens
            out["output_tokens"] += s.num_output_tokens
            out["prefill_s"] += s.all_started_s if s.all_started_s is not None else s.elapsed_s
            out["decode_s"] += s.decode_s
            out["decode_tokens"] += s.decode_tokens
            out["decode_steps"] += s.num_steps - (call["steps_at_all_started"] or s.num_steps)
        return out


@dataclass
class SideRun:
    wall_s: float
    summary: RunSummary
    clocks: list[PhaseClock] = field(default_factory=list)  # one per evaluation the side ran


def run_side(
    config: EngineConfig | RunTarget,
    options: EvalOptions,
    baseline: str,
    work_dir: str | None,
    progress_for: Callable | None = None,
) -> SideRun:
    """One whole verdict into a fresh runs folder (removed after); baseline "paired" or "separate" (a plain run
    has none to make, either way). config: our engine's configuration, or a run target on servers (`--endpoint`)."""
    clocks: list[PhaseClock] = []

    @contextlib.contextmanager
    def clocked():
        outer = progress_for() if progress_for is not None else contextlib.nullcontext(None)
        with outer as progress:
            clocks.append(PhaseClock(progress))
            yield clocks[-1]

    out = tempfile.mkdtemp(prefix="specdec-verdict-bench-", dir=work_dir)
    try:
        t0 = time.perf_counter()
        plan = RunPlan(options, out, resume=False, baseline=baseline)
        if isinstance(config, RunTarget):
            backend = make_backend("endpoint", config)
        else:
            backend = make_backend("local", RunTarget(config))
        summary = run(plan, backend, clocked)
        return SideRun(time.perf_counter() - t0, summary, clocks)
    finally:
        shutil.rmtree(out, ignore_errors=True)


def plain_phase_rates(run: SideRun, roof: roofline.Roofline) -> roofline.PhaseRates:
    """The plain run's prefill GFLOP/s and decode GB/s against the limits (the mean prompt length stands in for
    each prompt's in the attention term: the progress stats carry totals only)."""
    p = run.clocks[-1].phases()
    n = max(int(p["requests"]), 1)
    mean_prompt, mean_output = p["prompt_tokens"] / n, p["output_tokens"] / n
    return roof.rates(
        [round(mean_prompt)] * n,
        p["prefill_s"],
        p["decode_steps"],
        int(p["decode_tokens"]),
        mean_prompt + mean_output / 2,
        p["decode_s"],
    )


def _model_shape(config: EngineConfig) -> tuple[Any, int, Any]:
    """(model config, dtype bytes, device) of a run, without loading its weights."""
    import torch

    from ...workers.loading.checkpoint import load_checkpoint
    from ...workers.memory.device import resolve_device, resolve_dtype

    device = resolve_device(config.device)
    dtype = resolve_dtype(config.dtype, device)
    return load_checkpoint(config.model).config, torch.empty((), dtype=dtype).element_size(), device


def _audit_s(summary: RunSummary) -> float:
    """Seconds the paired twins' audit took (0 when the run had none)."""
    return float(((summary.baseline or {}).get("audit") or {}).get("elapsed_s") or 0.0)


def failed_gates(run_summary: RunSummary | dict[str, Any]) -> list[str]:
    """Why a side's run FAILed, gate by gate, in the gates' own words ("acceptance on gsm8k: position 2 rate ..."):
    the verdict column alone cannot tell a lossless failure from an acceptance one."""
    summary = run_summary.to_json() if isinstance(run_summary, RunSummary) else run_summary
    why = []
    for name, task in summary["tasks"].items():
        if task.get("verdict") == Verdict.FAIL:
            report = (task.get("report") or "").strip().splitlines()
            why.append(f"accuracy on {name}: {report[-1] if report else 'FAIL'}")
        for key, gate in gate_keys().items():
            found = task.get(key) or {}
            if found.get("verdict") == Verdict.FAIL:
                why.append(f"{gate} on {name}: {found.get('reason') or 'FAIL'}")
        stopped = task.get("stopped") or {}
        if stopped.get("verdict") == Verdict.FAIL and stopped.get("gate") not in gate_keys().values():
            why.append(f"early stop ({stopped.get('gate')}) on {name}: {stopped.get('reason')}")
    if summary.get("failing_events"):
        why.append(f"events: {summary['failing_events']} failing event(s)")
    if summary.get("verdict") == Verdict.FAIL and not why:
        why.append("the run FAILed (no gate names a reason)")
    return why


def _scored(spec_config: EngineConfig, options: EvalOptions) -> bool:
    """Whether every task of the bench is judged in distribution (no baseline to decode, separate or paired)."""
    from ...workers.engine.engine import identity_of
    from ..lossless.scoring import is_sampled, judged_in_distribution

    return judged_in_distribution(identity_of(spec_config)) and all(is_sampled(t.temperature) for t in options.tasks)


def _lossless(summary: RunSummary) -> str:
    verdicts = [r.verdict if (r := LOSSLESS.result(t)) else "-" for t in summary.tasks.values()]
    return ",".join(verdicts)


def run_verdict_bench(
    spec_config: EngineConfig,
    plan: VerdictBenchPlan,
    log: Callable[[str], None] | None = None,
    progress_for: Callable | None = None,
) -> dict[str, Any]:
    """The three sides, `plan.rounds` rounds, interleaved."""
    if spec_config.spec is None:
        raise UserError("the verdict benchmark compares spec-dec verdicts with a plain one: add --spec eagle3")
    say = log or (lambda _msg: None)
    options, subset = plan.options()
    for task in options.tasks:
        source_for(task, options.data_dir)  # missing data: one clear error before any model loads
    plain_config = baseline_config(spec_config)
    sides: dict[str, Callable[[int], SideRun]] = {
        PLAIN: lambda _r: run_side(plain_config, options, "separate", plan.work_dir, progress_for),
        SEPARATE: lambda _r: run_side(spec_config, options, "separate", plan.work_dir, progress_for),
        PAIRED: lambda _r: run_side(spec_config, options, "paired", plan.work_dir, progress_for),
    }
    if _scored(spec_config, options):  # one way to a verdict: the run and its scoring (`run`)
        sides = {PLAIN: sides[PLAIN], SCORED: sides[SEPARATE]}
    model_config, dtype_bytes, device = _model_shape(spec_config)
    say(f"bench --verdict: measuring this machine's limits on {device} ...")
    limits = measure_limits_apart(device, plan.gemm_size, plan.bandwidth_mib)

    def before(r: int, name: str) -> None:
        say(f"bench --verdict: round {r + 1}/{plan.rounds}, {name}: {options.tasks[0].name}, {subset} ...")

    runs = interleave(sides, plan.rounds, before)
    limits = limits.best(measure_limits_apart(device, plan.gemm_size, plan.bandwidth_mib))
    report = verdict_report(runs, roofline.Roofline(model_config, dtype_bytes, limits), subset, plan)
    return {"model": spec_config.model, "kv_cache": spec_config.kv_cache.version, **report}


def verdict_report(
    runs: dict[str, list[SideRun]], roof: roofline.Roofline, subset: str, plan: VerdictBenchPlan
) -> dict[str, Any]:
    """Median wall time per side, the ratios to the plain side with their spreads, the plain run's fractions of
    the hardware limits."""
    walls = {name: [r.wall_s for r in rs] for name, rs in runs.items()}
    report: dict[str, Any] = {
        "task": plan.task,
        "docs": plan.docs,
        "subset": subset,
        "rounds": plan.rounds,
        "max_output_len": plan.max_output_len,
        "sides": sides_report(runs, **{LOSSLESS.name: _lossless}),
    }
    if PAIRED in runs:
        report["sides"][PAIRED]["audit_s"] = [_audit_s(r.summary) for r in runs[PAIRED]]
    report["ratios"], report["unstable"] = {}, []
    for name in (SEPARATE, PAIRED, SCORED):
        if name in walls:
            add_ratio(report, walls, name, PLAIN)
    report["guards"] = guards(report["ratios"])
    per_round = [plain_phase_rates(r, roof).to_dict() for r in runs[PLAIN]]
    report["plain_phases"] = {k: spread_of([p[k] for p in per_round]).to_dict(3) for k in per_round[0]}
    report["hardware"] = roof.limits.to_dict()
    report["formulas"] = roofline.FORMULAS
    return report


def sides_report(runs: dict[str, list[SideRun]], **per_run: Callable[[Any], Any]) -> dict[str, dict[str, Any]]:
    """Each side's wall-time spread, its rounds' verdicts, `per_run` read off each round's summary, and the gates each
    round failed: the part of a verdict bench's report every plan shares (local and endpoint)."""
    return {
        name: {
            "wall_s": spread_of([r.wall_s for r in rs]).to_dict(1),
            "verdicts": [r.summary.verdict for r in rs],
            **{key: [read(r.summary) for r in rs] for key, read in per_run.items()},
            "failed": [failed_gates(r.summary) for r in rs],
        }
        for name, rs in runs.items()
    }


def add_ratio(report: dict[str, Any], walls: dict[str, list[float]], num: str, den: str) -> None:
    """`num / den` wall time into the report's ratios (median and spread over rounds), and its UNSTABLE line."""
    s = ratio_spread(walls[num], walls[den])
    report["ratios"][f"{num} / {den}"] = s.to_dict(3)
    line = unstable_line(f"{num} / {den} wall time", s)
    report["unstable"] += [line] if line else []


def guards(ratios: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each guarded ratio the report has (GUARDS): its limit, its median, and whether the median is within it."""
    out = {}
    for name, (den, limit) in GUARDS.items():
        found = ratios.get(f"{name} / {den}")
        if found is not None:
            out[f"{name} / {den}"] = {"limit": limit, "median": found["median"], "within": found["median"] <= limit}
    return out
