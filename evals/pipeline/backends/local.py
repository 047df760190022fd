"""The local backend: our engine in this process. It builds a plain engine of the same configuration (a baseline, a
control at max batch size 1, or 2 when the run uses 1) and pairs: a spec-dec run and its plain twins from one prefill,
the twins audited on a plain engine that shares the target's weights while they are intact."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import cached_property
from typing import Any

from ....errors import UserError
from ....results.run_summary import RunSummary
from ....workers.faults import behaviour_faults
from ....workers.interface import EngineIdentity
from ...lossless.baseline import BaselineRef
from ...lossless.control import other_shape
from ...lossless.scoring import Scorer
from ...run_identity import baseline_config
from ...run_types import RunPlan
from ..one_run import ProgressFor, evaluate_side
from ..run_sides import BASELINE, Side, side_config, side_identity
from . import Abilities, RunTarget, refuse_baseline_endpoint


class LocalBackend:
    def __init__(self, target: RunTarget) -> None:
        self.target = target
        self.config = target.engine

    dry_run = False

    @cached_property
    def abilities(self) -> Abilities:
        from ....workers.memory.device import dtype_name, resolve_device, resolve_dtype

        config = self.config
        # Environmental faults act on one engine (they would touch the twins too), so those runs get a separate clean
        # baseline. Behaviour faults are planted code bugs, in every engine the run builds (twins and audit included,
        # each firing only on its own code path), so they pair like a code patch: the audit is what catches one that
        # reaches the twins.
        environmental = [f for f in config.inject if f not in behaviour_faults([f])]
        return Abilities(
            speculative=config.spec is not None,
            dtype=dtype_name(resolve_dtype(config.dtype, resolve_device(config.device))),
            plain_side=True,
            pairs=not environmental,
            control_shape={"max_batch_size": other_shape(config.max_batch_size)},
            reuses_baseline=True,
            scores=True,
        )

    def check_target(self) -> None:
        refuse_baseline_endpoint(self.target)
        if self.target.job.tp not in (None, 1):
            raise UserError("--tp > 1 needs --gpus (one process per TP rank)")

    def preflight(self, plan: RunPlan) -> None:
        check_draft_model(self.config)

    def identity(self, side: Side) -> EngineIdentity:
        from ....workers.engine.engine import identity_of

        return side_identity(identity_of(side_config(self.config, side)), side)

    def declared_identity(self) -> EngineIdentity:
        return self.identity(Side("run"))

    def evaluate(
        self, side: Side, plan: RunPlan, baseline: BaselineRef, progress_for: ProgressFor | None
    ) -> RunSummary:
        from ....workers.engine.engine import Engine

        config = side_config(self.config, side)
        if baseline.scorer is None or config.spec is None:
            return evaluate_side(Engine.build(config), side, plan, baseline, progress_for)
        # the gate's scorer of sampled outputs: a plain engine beside the run, on its weights while they are intact
        # (building it from the checkpoint again cost more than the scoring itself: `bench --verdict` sampled)
        engine, make_plain = _with_plain_sibling(config)
        scorer = Scorer(lambda: make_plain(0), LOCAL_SCORER)
        return evaluate_side(engine, side, plan, replace(baseline, scorer=scorer), progress_for)

    def evaluate_paired(
        self, plan: RunPlan, control: str | None, progress_for: ProgressFor | None, score_sampled: bool = False
    ) -> RunSummary:
        from ..paired_run import run_paired

        engine, make_plain = _with_plain_sibling(self.config)
        scorer = Scorer(lambda: make_plain(0), LOCAL_SCORER) if score_sampled else None
        try:
            if progress_for is None:
                return run_paired(engine, plan, make_plain, None, control, scorer)
            with progress_for() as progress:
                return run_paired(engine, plan, make_plain, progress, control, scorer)
        finally:
            engine.close()

    def show(self, plan: RunPlan) -> None:
        raise RuntimeError("a local run has no dry run")

    def scorer(self) -> Scorer:
        from ....workers.engine.engine import Engine

        return Scorer(lambda: Engine.build(side_config(self.config, BASELINE)), LOCAL_SCORER)


def _with_plain_sibling(config) -> tuple[Any, Callable[[int], Any]]:
    """The engine of `config` and make_plain(tokens): a plain engine beside it on the same target weights (its own
    KV pool of `tokens` positions, 0: one longest sequence; no spec worker), or on its own weights once the spec
    engine changed the shared ones (the twin audit's WeightSeal, taken before a spec worker is attached)."""
    from ....workers.engine.engine import Engine
    from ....workers.engine.parts import build_target_model
    from ....workers.loading.checkpoint import load_checkpoint
    from ....workers.memory.sibling import sibling_config
    from ...lossless.twin_audit import WeightSeal

    checkpoint = load_checkpoint(config.model)
    target = build_target_model(config, checkpoint)
    seal = WeightSeal(target)
    engine = Engine.build(config, checkpoint=checkpoint, model=target)

    def make_plain(tokens: int) -> Engine:
        model = engine.model if seal.intact() else None  # changed by the spec engine: load its own
        plain = replace(baseline_config(config), max_batch_size=1)  # behaviour faults included: in the build
        return Engine.build(
            sibling_config(plain, engine, tokens, shares_weights=model is not None),
            checkpoint=engine.checkpoint,
            tokenizer=engine.tokenizer,
            model=model,
        )

    return engine, make_plain


LOCAL_SCORER = "our plain engine, in process (exact)"


def check_draft_model(config) -> None:
    """A spec-dec run's draft head folder is read and matched to the target now, not after the baseline run.
    The defaults (the shipped or the random head, default capture layers) are skipped: nothing a user gave can be
    wrong there, and the check would parse the target's GGUF header once more."""
    spec = config.spec
    if spec is None or (spec.draft_model in ("auto", "random") and spec.capture_layers is None):
        return
    from ....workers.loading.checkpoint import load_checkpoint, preset_of
    from ....workers.spec.head_check import check_draft_model as check

    checkpoint = load_checkpoint(config.model)
    check(config.spec, checkpoint.config, preset_of(checkpoint) or config.model)
