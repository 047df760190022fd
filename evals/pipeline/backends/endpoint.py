"""The endpoint backend: any OpenAI-compatible server. Its plain side is another server
(`--baseline-endpoint`: the same engine without speculation), evaluated each time (a server at a URL may have been
redeployed since a recorded run), and its noise-floor control that server again at concurrency 1 (2 when the run
uses 1). A server cannot pair, and what it is recorded under is known once it answers."""

from __future__ import annotations

from dataclasses import replace
from functools import cached_property

from ....errors import UserError
from ....results.run_summary import RunSummary
from ....workers.interface import EngineIdentity
from ...lossless.baseline import BaselineRef
from ...lossless.baseline_rules import endpoint_baseline_mode_problem, endpoint_job_problem, endpoint_pair_problem
from ...lossless.control import other_shape
from ...lossless.scoring import Scorer
from ...run_types import RunPlan
from ..one_run import ProgressFor, evaluate_side
from ..run_sides import Side
from . import Abilities, RunTarget


class EndpointBackend:
    def __init__(self, target: RunTarget) -> None:
        self.target = target
        self.server, self.baseline_server = target.endpoint.configs(target.engine, "kv_cache" in target.declared)

    dry_run = False

    @cached_property
    def abilities(self) -> Abilities:
        base = self.baseline_server
        return Abilities(
            speculative=self.server.spec is not None,
            dtype=self.server.dtype,
            plain_side=base is not None,
            pairs=False,
            control_shape={"concurrency": other_shape(base.concurrency)} if base is not None else None,
            reuses_baseline=False,
            scores=False,  # generation only (the endpoint engine)
        )

    def check_target(self) -> None:
        if self.target.engine.inject:
            raise UserError("--inject can never fire in an endpoint run: the faults are our engine's, not the server's")
        job = self.target.job
        problem = endpoint_job_problem(job.gpus, job.nnodes)
        if problem is None and self.baseline_server is not None:
            problem = endpoint_pair_problem(self.server.url, self.baseline_server.url)
        if problem is not None:
            raise UserError(problem)

    def preflight(self, plan: RunPlan) -> None:
        if plan.baseline_run is not None and self.baseline_server is not None:
            raise UserError(
                f"--baseline {plan.baseline_run} and --baseline-endpoint both name the lossless "
                "gate's baseline; give one"
            )
        if "baseline" in self.target.declared and (problem := endpoint_baseline_mode_problem(plan.baseline)):
            raise UserError(problem)

    def identity(self, side: Side) -> EngineIdentity | None:
        return None  # the served model, its version and the tokenizer's source come from the server's answers

    def declared_identity(self) -> EngineIdentity:
        from ....peers.client.config import EndpointURL

        s = self.server
        return EngineIdentity(
            kind="endpoint",
            model=s.served_model or s.model or EndpointURL.parse(s.url).public,
            spec=s.spec,
            max_draft_len=s.max_draft_len,
            kv_cache=s.kv_cache,
            dtype=s.dtype,
            resolved_dtype=None,
            tp_size=s.tp_size,
            world_size=s.tp_size,
            config={"endpoint": EndpointURL.parse(s.url).public},
        )

    def evaluate(
        self, side: Side, plan: RunPlan, baseline: BaselineRef, progress_for: ProgressFor | None
    ) -> RunSummary:
        from ....peers.client.engine import EndpointEngine

        if side.role == "run":
            config = self.server
        elif self.baseline_server is None:
            raise RuntimeError("an endpoint run without --baseline-endpoint has no plain side")
        elif side.role == "baseline":
            config = self.baseline_server
        else:  # a server started again for the control writes a log of its own, not over the baseline's
            log = self.baseline_server.server_log
            config = replace(
                self.baseline_server,
                concurrency=int(side.shape["concurrency"]),
                server_log=f"{log}.control" if log else None,
            )
        # Every side renders the same chat template variables (sent as chat_template_kwargs in chat requests).
        config = replace(config, chat_template_kwargs=plan.options.template_kwargs)
        return evaluate_side(EndpointEngine(config), side, plan, baseline, progress_for)

    def evaluate_paired(
        self, plan: RunPlan, control: str | None, progress_for: ProgressFor | None, score_sampled: bool = False
    ) -> RunSummary:
        raise RuntimeError("a server cannot pair: its twins could not be audited")

    def show(self, plan: RunPlan) -> None:
        raise RuntimeError("an endpoint run has no dry run")

    def scorer(self) -> Scorer | None:
        """The baseline server scores through the completions API's echo + logprobs (top logprobs only: a
        conservative verdict); without --baseline-endpoint there is none."""
        from ....peers.client.engine import EndpointEngine

        base = self.baseline_server
        if base is None:
            return None
        return Scorer(lambda: EndpointEngine(base), "the baseline server (echo + logprobs: conservative)")
