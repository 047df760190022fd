"""Test doubles for the spec-dec workers: an oracle draft, a worker that fails mid-draft."""

from __future__ import annotations

from specdec_eval.workers.spec.eagle3 import Eagle3OneModelWorker


def clone_worker(cls, engine):
    """Replace the engine's Eagle3 worker by an instance of a test subclass with the same parts."""
    worker = cls(engine.spec_worker.context)
    engine.spec_worker = engine.executor.spec = worker
    return worker


class OracleWorker(Eagle3OneModelWorker):
    """Runs the real draft loop (so the draft KV is written as usual), then proposes the target's own greedy
    continuation, known in advance (by prompt index): every draft must be accepted."""

    reference: dict[int, list[int]] = {}

    def _draft(self, step):
        super()._draft(step)
        drafts = []
        for item, new in zip(step.items, step.emitted, strict=True):
            ref = self.reference[item.request.index]
            have = len(item.request.output_token_ids) + len(new)
            drafts.append([(ref + [0] * (self.K + 1))[have + i] for i in range(self.K)])
        return drafts


class FailingDraftWorker(Eagle3OneModelWorker):
    """Raises inside draft step `fail_at` of the `fail_on_call`-th forward: after prepare_for_spec_dec."""

    fail_at = 1
    fail_on_call = 2

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls = 0

    def _forward_impl(self, step):
        self.calls += 1
        return super()._forward_impl(step)

    def draft_step_hook(self, index):
        if self.calls == self.fail_on_call and index == self.fail_at:
            raise RuntimeError(f"injected failure in draft step {index}")
