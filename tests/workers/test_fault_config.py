"""A fault that can never fire is refused when the engine configuration is built: a run would look as if
the engine had survived it. (A fault scheduled past the run's last step cannot be known up front.)"""

from __future__ import annotations

import pytest
from specdec_eval.workers.config import EngineConfig, SpecConfig
from specdec_eval.workers.engine_options import from_options
from specdec_eval.workers.faults import behaviour_faults

from specdec_eval.errors import UserError

SPEC = SpecConfig(max_draft_len=3)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"inject": ("draft_step:1",)}, "draft_step is a spec-dec point; add --spec"),
        ({"inject": ("draft_step",)}, "add --spec"),
        ({"inject": ("prepare_for_spec_dec",)}, "add --spec"),
        ({"inject": ("restore@2",)}, "add --spec"),
        ({"inject": ("draft_step:3",), "spec": SPEC}, r"draft steps are 0..2 with --draft-len 3"),
        ({"inject": ("draft_step:99",), "spec": SPEC}, r"draft steps are 0..2"),
        ({"inject": ("warmup_oom",), "warmup": "off"}, r"warmup does not run \(--warmup off\)"),
        ({"inject": ("warmup_oom",), "warmup": "auto", "device": "cpu"}, "runs it on CUDA only"),
        ({"inject": ("target_forward", "nope")}, "cannot read --inject 'nope'"),
    ],
)
def test_faults_that_cannot_fire_are_refused(kwargs, message):
    with pytest.raises(UserError, match=message):
        EngineConfig(**kwargs)


@pytest.mark.parametrize("bug", ["emit_rejected_draft", "accept_off_by_one", "spec_alters_target@3"])
def test_a_bug_class_without_spec_is_refused_from_the_flags_and_carried_by_a_plain_config(bug):
    """A behaviour fault is a planted code bug: a plain engine of the same build carries it (the run's baseline and
    audit engines), where its spec-dec path is never taken; a user asking for one without --spec is told."""
    with pytest.raises(UserError, match="it is a bug on a spec-dec code path; add --spec"):
        from_options(model="tiny", inject=[bug])
    assert EngineConfig(model="tiny", inject=(bug,)).inject == (bug,)
    assert from_options(model="tiny", spec="eagle3", inject=[bug]).inject == (bug,)


def test_behaviour_faults_are_told_from_environmental_ones():
    texts = ("warmup_oom", "draft_kv_into_target", "restore@2", "emit_rejected_draft@3", "sample_key_shift x2")
    assert behaviour_faults(texts[:4]) == ("draft_kv_into_target", "emit_rejected_draft@3")
    assert behaviour_faults(("accept_off_by_one@4x2", "target_forward")) == ("accept_off_by_one@4x2",)
    with pytest.raises(UserError, match="cannot read --inject"):
        behaviour_faults(texts)  # a spec it cannot read is a user error, never silently environmental


def test_faults_that_can_fire_are_accepted():
    EngineConfig(inject=("target_forward@100000",))  # may fire: only the run knows how many steps it takes
    EngineConfig(inject=("draft_step:2", "restore", "prepare_for_spec_dec", "emit_rejected_draft@3"), spec=SPEC)
    EngineConfig(inject=("warmup_oom",), warmup="on", device="cpu")
    EngineConfig(inject=("warmup_oom",), warmup="auto", device="cuda")


def test_warmup_auto_on_auto_device_follows_cuda(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    EngineConfig(inject=("warmup_oom",), device="auto")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(UserError, match="runs it on CUDA only"):
        EngineConfig(inject=("warmup_oom",), device="auto")


def test_the_spec_dec_baseline_twin_drops_the_faults():
    """The pipeline's non-speculative baseline of a spec-dec run with spec-only faults must still build."""
    from specdec_eval.evals.run_identity import baseline_config

    config = EngineConfig(model="tiny", spec=SPEC, inject=("draft_step:1@2",))
    assert baseline_config(config).inject == ()


def test_the_inject_help_names_every_fault_point():
    from specdec_eval.cli import options
    from specdec_eval.workers.faults import FAULT_POINTS

    help_text = options.Inject.__metadata__[0].help
    assert all(point in help_text for point in FAULT_POINTS)
