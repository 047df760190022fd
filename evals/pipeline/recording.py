"""A run in the store, from the claim of its folder to its finished manifest: claim (one writer per run; an unfinished
run of exactly this configuration is resumed), open (the manifest and the generation cache of partial/), and record
(summary, gates, samples, events, then the finished manifest). Where the evaluation between them comes from is
`one_run` and `paired_run`; which runs a command makes is `run`'s policy."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ...errors import UserError
from ...results import claims, store
from ...results import manifest as mf
from ...results.run_summary import RunSummary
from ...workers.faults import behaviour_faults
from ...workers.interface import EngineIdentity, InferenceEngine
from ..gates.registry import parse_opt_in
from ..gates.resolved_run import resolve_run
from ..gates.verdict import apply_gates, summarise
from ..lossless.baseline import ResolvedBaseline
from ..run_identity import git_state, run_config, test_id
from ..run_types import RunPlan, TaskResult
from .resume import GenerationCache


@dataclass
class OpenRun:
    """A claimed run folder with its manifest written, being evaluated."""

    run: store.Run
    key: str
    manifest: dict[str, Any]
    cache: GenerationCache
    resumed: bool
    started: float
    reused: int = 0  # generations found in partial/ when the run was opened (the cache grows as the run goes)

    @property
    def test_id(self) -> str:
        return self.manifest["test_id"]


def claim_run(plan: RunPlan, key: str) -> tuple[store.Run, bool]:
    """The run folder this configuration writes (resumed: an unfinished one of the same key), its lock held."""
    try:
        return claims.acquire_run(plan.out, key, plan.resume)  # one writer per run
    except (claims.RunBusyError, FileNotFoundError) as e:
        raise UserError(str(e)) from None


def open_run(engine: InferenceEngine, plan: RunPlan, run: store.Run, key: str, resumed: bool, **extra) -> OpenRun:
    """Write the run's manifest (what ran, where, at which commit) and open its generation cache."""
    identity, options = engine.identity, plan.options
    started = time.time()
    manifest = {
        "run_id": run.run_id,
        "config_key": key,
        "test_id": test_id(engine, options),
        "config": run_config(identity, options),
        **git_state(),
        "engine": _engine_record(identity),
        "versions": mf.versions(),
        "devices": mf.devices(),
        "world_size": identity.world_size,
        "command": mf.command_line(),
        "started": started,
        "resumed": resumed,
        **extra,
    }
    run.write_manifest(manifest)
    cache = GenerationCache(run.partial_dir)
    if resumed:
        print(f"resuming run {run.run_id}: {len(cache.entries)} finished generations reused", file=sys.stderr)
    return OpenRun(run, key, manifest, cache, resumed, started, len(cache.entries) if resumed else 0)


def record_run(
    engine: InferenceEngine,
    plan: RunPlan,
    opened: OpenRun,
    results: list[TaskResult],
    events: list[dict],
    baseline: ResolvedBaseline,
    twin: dict[str, Any] | None = None,
) -> RunSummary:
    """Summary and gates; then samples, events, summary and the finished manifest are written."""
    identity, run = engine.identity, opened.run
    if identity.server is not None and "log_lines_read" in identity.server:
        print(server_log_line(identity.server), file=sys.stderr)
    summary = summarise(results, identity, events, time.time() - opened.started)
    summary = summary.replace(
        run_id=run.run_id,
        run_dir=str(run.path),
        test_id=opened.test_id,
        reused_generations=opened.reused,
        reported_acceptance=engine.reported_acceptance(),
    )
    never = _faults_never_fired(identity, events)
    if never:  # e.g. target_forward@100000 in a run of fewer steps: the run tested nothing it was asked to
        summary = summary.replace(faults_never_fired=tuple(never))
    samples = [s for r in results for s in r.samples]
    if twin is not None:  # this run is the plain twins of a paired run: say so, and what the audit found
        summary = summary.replace(paired_twin=twin)
        opened.manifest["paired_twin"] = twin
    resolved = resolve_run(identity, opened.test_id, plan, baseline, results, parse_opt_in(plan.gates or ()))
    summary = apply_gates(summary, results, samples, resolved)
    if identity.spec is not None and baseline.audit is not None:
        opened.manifest["baseline_audit"] = baseline.audit
    if any(r.stopped for r in results):
        # a partial evaluation: never some later run's lossless baseline
        summary = summary.replace(early_stopped=True)
    orders = {r.task: r.subset for r in results if r.subset}
    if orders:  # the seeded document order of every task, as evaluated
        opened.manifest["orders"] = orders
    run.write_samples(samples)
    run.write_events(events)
    run.write_summary(summary.to_json())
    run.write_manifest(
        {**opened.manifest, "finished": time.time(), "elapsed_s": round(time.time() - opened.started, 1)}
    )
    return summary


def server_log_line(server: dict[str, Any]) -> str:
    """What a run says about the server log it read: how many lines, how many were cut, why reading stopped."""
    said = f"server log: {server['log_lines_read']} lines read ({server['log']})"
    if server.get("log_lines_cut"):
        said += f", {server['log_lines_cut']} cut at their start"
    if server.get("log_problem"):
        said += f"; {server['log_problem']}: its events were not all checked"
    return said


def _faults_never_fired(identity: EngineIdentity, events: list[dict]) -> list[str]:
    """Faults the run was asked to inject that never fired. A planted bug on a spec-dec path cannot fire in a plain
    engine that carries it (a baseline of a mutated build), so it is not expected there."""
    fired = {e.get("spec") for e in events if e["type"] == "fault_injected"}
    expected = [f for f in identity.config.get("inject") or () if identity.spec or f not in behaviour_faults([f])]
    return [f for f in expected if f not in fired]


def _engine_record(identity: EngineIdentity) -> dict[str, Any]:
    """What the manifest says about the engine beyond its configuration."""
    record = {"kind": identity.kind, "model": identity.model, "resolved_dtype": identity.resolved_dtype}
    if identity.server is not None:
        record["server"] = identity.server
    return record


@contextmanager
def discarded_on_user_error(*claimed: tuple[store.Run, bool]) -> Iterator[None]:
    """A user error raised while evaluating into newly made runs removes them again if they hold no finished
    generation (store.Run.discard_unstarted), so that nothing is left half written; a resumed run is kept as it was.
    A safety net: what can be checked (the references, --sample) is checked before a run folder is made."""
    try:
        yield
    except UserError:
        for run, resumed in claimed:
            if not resumed:
                run.discard_unstarted()
        raise
