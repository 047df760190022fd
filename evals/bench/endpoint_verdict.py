"""What a verdict costs against servers, the user's real case: `bench --verdict --endpoint URL --baseline-endpoint
URL0` (URL speculates, URL0 serves the same model without speculation), each side a whole `run` into a fresh runs
folder, interleaved in rounds, as the local verdict bench does:

- plain: a plain run on the baseline server (what every ratio is measured against);
- spec+baseline server: the speculating run, then its lossless baseline decoded by the baseline server (a server
  cannot pair: the baseline is a second decode);
- plain, sampled / spec+scored, sampled: the same documents at temperature > 0 (`gsm8k_sampled`), a plain run on the
  baseline server, and the speculating run whose outputs the baseline server scores (teacher forcing through echo +
  logprobs): the sampled verdict, whose ratio is to the plain sampled run.

The guards of a verdict's cost (`verdict_timing.GUARDS`) are printed with the ratios."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ...errors import UserError
from ...workers.config import EngineConfig
from ..pipeline.backends import RunTarget
from ..run_identity import baseline_config
from ..tasks.registry import source_for
from .rounds import interleave
from .verdict_timing import SideRun, VerdictBenchPlan, add_ratio, guards, run_side, sides_report

PLAIN, SPEC = "plain", "spec+baseline server"
PLAIN_SAMPLED, SAMPLED = "plain, sampled", "spec+scored, sampled"
SAMPLED_TASK = "gsm8k_sampled"
RATIOS = ((SPEC, PLAIN), (PLAIN_SAMPLED, PLAIN), (SAMPLED, PLAIN_SAMPLED), (SAMPLED, PLAIN))


def endpoint_sides(
    spec_config: EngineConfig, endpoint, plan: VerdictBenchPlan, progress_for: Callable | None = None
) -> dict[str, Callable[[int], SideRun]]:
    """The four sides as `interleave` takes them. endpoint: the run's EndpointOptions (URL and baseline URL)."""
    if not endpoint.endpoint or not endpoint.baseline_endpoint:
        raise UserError(
            "bench --verdict --endpoint URL needs --baseline-endpoint URL0 (the same model served without "
            "speculation): the plain runs and the lossless baseline run there"
        )
    greedy, _ = plan.options()
    sampled, _ = replace(plan, task=SAMPLED_TASK).options()
    for task in greedy.tasks + sampled.tasks:
        source_for(task, greedy.data_dir)  # missing data: one clear error before any server is asked
    plain_target = RunTarget(
        baseline_config(spec_config),
        endpoint=replace(
            endpoint,
            endpoint=endpoint.baseline_endpoint,
            serve_cmd=endpoint.baseline_serve_cmd,
            server_log=endpoint.baseline_server_log,
            baseline_endpoint=None,
            baseline_serve_cmd=None,
            baseline_server_log=None,
        ),
    )
    spec_target = RunTarget(spec_config, endpoint=endpoint)
    sampled_spec = RunTarget(
        replace(spec_config, spec=replace(spec_config.spec, sampling="rejection")), endpoint=endpoint
    )

    def side(target: RunTarget, options) -> Callable[[int], SideRun]:
        return lambda _r: run_side(target, options, "separate", plan.work_dir, progress_for)

    return {
        PLAIN: side(plain_target, greedy),
        SPEC: side(spec_target, greedy),
        PLAIN_SAMPLED: side(plain_target, sampled),
        SAMPLED: side(sampled_spec, sampled),
    }


def run_endpoint_verdict_bench(
    spec_config: EngineConfig,
    endpoint,
    plan: VerdictBenchPlan,
    log: Callable[[str], None] | None = None,
    progress_for: Callable | None = None,
) -> dict[str, Any]:
    if spec_config.spec is None:
        raise UserError("the verdict benchmark compares spec-dec verdicts with a plain one: add --spec eagle3")
    say = log or (lambda _msg: None)
    sides = endpoint_sides(spec_config, endpoint, plan, progress_for)
    _, subset = plan.options()

    def before(r: int, name: str) -> None:
        say(f"bench --verdict --endpoint: round {r + 1}/{plan.rounds}, {name}, {subset} ...")

    runs = interleave(sides, plan.rounds, before)
    report = endpoint_report(runs, subset, plan)
    return {"endpoint": endpoint.endpoint, "baseline_endpoint": endpoint.baseline_endpoint, **report}


def endpoint_report(runs: dict[str, list[SideRun]], subset: str, plan: VerdictBenchPlan) -> dict[str, Any]:
    walls = {name: [r.wall_s for r in rs] for name, rs in runs.items()}
    report: dict[str, Any] = {
        "task": plan.task,
        "sampled_task": SAMPLED_TASK,
        "docs": plan.docs,
        "subset": subset,
        "rounds": plan.rounds,
        "max_output_len": plan.max_output_len,
        "sides": sides_report(runs),
        "ratios": {},
        "unstable": [],
    }
    for num, den in RATIOS:
        add_ratio(report, walls, num, den)
    report["guards"] = guards(report["ratios"])
    return report
