"""The bug-class matrix on vLLM (`selftest --mutants --engine vllm`): the plugin's token edits on hand-made rows, how
it picks the live class, the matrix's class table against the plugin's, and (slow) the whole matrix against real
vLLM servers: every class caught by its gate, the unmutated server PASSing every gate."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest
from specdec_eval.evals.run_types import EvalOptions
from specdec_eval.evals.selftest import vllm_mutants as vm
from specdec_eval.evals.tasks.registry import TASKS

from specdec_eval.errors import UserError

from ...cli.test_run_cli import SHARED_DATA, needs_shared_data

PLUGIN_DIR = Path(__file__).resolve().parents[2] / "vllm_plugin"
# The slow matrix's size: the smallest at which every class was caught (README, "What this tool catches on vLLM").
MATRIX_DOCS = 6  # the paired acceptance test decides from 5 drafting documents on (its swap p 2^-n < 0.05)
MATRIX_TOKENS = 64


@pytest.fixture
def plugin(monkeypatch):
    """The plugin package, imported from its folder (no vLLM needed: its top level imports none)."""
    monkeypatch.syspath_prepend(str(PLUGIN_DIR))
    import specdec_vllm_mutants
    from specdec_vllm_mutants import edits

    return specdec_vllm_mutants, edits


# A step of one request with 3 drafts [5, 6, 7]: the target agreed with 5 and 6, then said 9 (not 7).
DRAFTS = [5, 6, 7]
REJECTED = [5, 6, 9]
ALL_ACCEPTED = [5, 6, 7, 8]  # 8: the bonus token


def test_each_row_edit_changes_what_its_bug_changes(plugin):
    _, edits = plugin
    assert edits.edit_row("emit_rejected_draft", REJECTED, DRAFTS) == [5, 6, 7]  # the rejected 7 instead of 9
    assert edits.edit_row("emit_rejected_draft", ALL_ACCEPTED, DRAFTS) == ALL_ACCEPTED  # nothing was rejected
    assert edits.edit_row("drop_accepted", REJECTED, DRAFTS) == [6, 9]
    assert edits.edit_row("duplicate_accepted", REJECTED, DRAFTS) == [5, 5, 6, 9]
    assert edits.edit_row("duplicate_accepted", ALL_ACCEPTED, DRAFTS) == [5, 5, 6, 7]  # no room: the bonus falls off
    for name in edits.ROW_EDITS:  # no draft accepted: nothing to drop or repeat; a row with no drafts is left alone
        assert edits.edit_row(name, [4], []) == [4]
    assert edits.edit_row("drop_accepted", [9], DRAFTS) == [9]
    assert edits.never_matching([0, 1, 49151]) == [1, 0, 49150]


def test_the_plugin_plants_nothing_unless_a_class_is_live(plugin, tmp_path):
    mutants, _ = plugin
    assert mutants.Selection("drop_accepted").current() == "drop_accepted"
    live = tmp_path / "class"
    chosen = mutants.Selection(f"@{live}")
    assert chosen.current() is None  # no file: untouched
    live.write_text("\n")
    assert chosen.current() is None  # empty: untouched
    live.write_text("bonus_wrong_row\n")
    assert chosen.current() == "bonus_wrong_row"  # read again at each step
    with pytest.raises(ValueError, match="unknown class 'nope'"):
        mutants.Selection("nope")


def test_register_without_the_variable_imports_nothing_of_vllm(plugin, monkeypatch):
    mutants, _ = plugin
    monkeypatch.delenv(mutants.ENV, raising=False)
    mutants.register()  # would fail here, with no vLLM in this venv, if it tried to patch


def test_the_matrix_table_is_the_plugins(plugin):
    mutants, _ = plugin
    assert set(vm.VLLM_CLASS_NAMES) == set(mutants.CLASSES) and vm.PLUGIN_ENV == mutants.ENV
    assert vm.VLLM_CLASSES[-1].name == "oom_first_spec_step"  # it kills the engine core: last
    assert [b.name for b in vm.select_vllm_classes(["drop_accepted,bonus_wrong_row"])] == [
        "unmutated",
        "bonus_wrong_row",
        "drop_accepted",
    ]
    with pytest.raises(UserError, match="unknown vLLM bug class nope"):
        vm.select_vllm_classes(["nope"])


def test_only_the_speculating_server_loads_a_class(tmp_path):
    setup = vm.VllmSetup(venv="/v", model_dir="/m", head="/h")
    plain, spec = shlex.split(setup.serve_cmd(1, None)), shlex.split(setup.serve_cmd(2, tmp_path / "c"))
    assert not any(w.startswith(vm.PLUGIN_ENV) for w in plain) and "--spec-method" not in plain
    assert f"{vm.PLUGIN_ENV}=@{tmp_path / 'c'}" in spec and spec[spec.index("--spec-model") + 1] == "/h"
    with pytest.raises(UserError, match="no vLLM venv at /v"):
        setup.check()


def _vllm_setup() -> vm.VllmSetup:
    """The setup `make setup-vllm` makes; skips with the reason when it is missing (fails under CI=true)."""
    from specdec_eval.workers.spec.eagle3_head import SHIPPED_HEADS

    setup = vm.default_setup(None, None, str(SHIPPED_HEADS["smollm2"]), draft_len=3)
    try:
        setup.check()
    except UserError as e:
        if os.environ.get("CI", "").lower() in ("true", "1", "yes"):
            pytest.fail(f"{e} (CI must run the vLLM matrix)")
        pytest.skip(str(e))
    return setup


@pytest.mark.slow
@needs_shared_data
def test_every_class_planted_in_vllm_is_caught_and_vllm_untouched_passes(tmp_path, capsys, vllm_matrix_servers):
    """The smallest matrix that still catches every class: MATRIX_DOCS documents of MATRIX_TOKENS tokens; printed.
    On the session's servers (the peer tests' plain and eagle3 ones): two starts fewer."""
    from specdec_eval.cli.mutants_print import print_matrix
    from specdec_eval.workers.engine_options import from_options

    setup = _vllm_setup()
    config = from_options(model="smollm2", spec="eagle3", draft_len=3, dtype="float32")
    options = EvalOptions(
        tasks=[TASKS["gsm8k"]],
        data_dir=str(SHARED_DATA),
        limit=MATRIX_DOCS,
        max_output_len=MATRIX_TOKENS,
        no_reference=True,
    )
    classes = vm.select_vllm_classes(None)
    report = vm.run_vllm_matrix(setup, config, options, classes, workdir=str(tmp_path), servers=vllm_matrix_servers)
    with capsys.disabled():
        print()
        print_matrix(report)
    results = {row["class"]: row["result"] for row in report["rows"]}
    assert results == {"unmutated": "PASS", **{name: "caught" for name in vm.VLLM_CLASS_NAMES}}
    assert all(not row["never_fired"] for row in report["rows"])
    clean = report["rows"][0]
    assert clean["cells"]["lossless"]["verdict"] == "PASS" and clean["cells"]["events"]["verdict"] == "PASS"
    assert clean["acceptance_reference"]["ref_al"] > 1.5 and not clean["acceptance_reference"].get("refused")
    never = next(row for row in report["rows"] if row["class"] == "draft_never_matches")
    assert never["cells"]["lossless"]["verdict"] == "PASS"  # outputs unchanged: only the acceptance shows it
    assert never["cells"]["acceptance"]["verdict"] == "FAIL"  # against the unmutated server's own reference
    assert list(tmp_path.iterdir()) == []  # servers' logs and runs removed with the matrix's folder


@pytest.mark.slow
def test_the_plugin_changes_vllms_own_rejection_sampler_only_when_a_class_is_live():
    """vLLM's real RejectionSampler (no server: ~20 s, most of it importing vLLM), loaded with the plugin as a vLLM
    worker loads it, on one hand-made greedy step: with no class live it emits what vLLM emits (accepted drafts,
    then the target's token or the bonus), with each class what the class says."""
    setup = _vllm_setup()
    names = ["", "emit_rejected_draft", "bonus_wrong_row", "drop_accepted", "duplicate_accepted"]
    probe = subprocess.run(
        [setup.python, str(PLUGIN_DIR / "sampler_probe.py"), *names], capture_output=True, text=True, timeout=600
    )
    assert probe.returncode == 0, probe.stderr[-3000:]
    found = json.loads(probe.stdout.strip().splitlines()[-1])
    assert found["planted"]
    P = -1  # vLLM's placeholder for a position not emitted
    assert found["steps"] == {
        "": {"rejected": [5, 6, 9, P], "accepted": [5, 6, 7, 8]},
        "emit_rejected_draft": {"rejected": [5, 6, 7, P], "accepted": [5, 6, 7, 8]},
        "bonus_wrong_row": {"rejected": [5, 6, 9, P], "accepted": [5, 6, 7, 7]},
        "drop_accepted": {"rejected": [6, 9, P, P], "accepted": [6, 7, 8, P]},
        "duplicate_accepted": {"rejected": [5, 5, 6, 9], "accepted": [5, 5, 6, 7]},
    }
