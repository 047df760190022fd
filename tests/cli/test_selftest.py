"""`specdec-eval selftest`: exit 0 when the unguarded half fails as it should and the guarded half passes;
non-zero when the harness would miss the failure."""

from __future__ import annotations

import json

import pytest
from specdec_eval.workers.spec.base import SpecWorkerBase

from .test_generate_cli import run_cli


@pytest.mark.parametrize("mode", ["inject", "budget"])
def test_selftest_passes(capsys, mode):
    code, out, err = run_cli(capsys, "selftest", "--mode", mode, "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["ok"] is True
    none, guarded = report["runs"]["guard none"], report["runs"]["guard template"]
    assert none["verdict"] == "FAIL" and none["leaked_fields"] == ["seq_lens", "kv_lens", "num_contexts"]
    assert none["failed"] == none["requests"] and "never restored" in none["first_error"]
    assert guarded["verdict"] == "PASS" and guarded["identical"] == guarded["requests"]
    assert guarded["events"]["warmup_oom"] >= 1 and guarded["events"]["spec_state_restored"] >= 1
    if mode == "budget":
        b = report["budget"]
        assert b["draft_need_bytes"] > b["headroom_bytes"] >= b["target_need_bytes"]


def test_selftest_table(capsys):
    code, out, _ = run_cli(capsys, "selftest")
    assert code == 0
    assert "leaked fields" in out and "seq_lens, kv_lens, num_contexts" in out and "selftest PASSED" in out


def test_selftest_fails_when_the_guard_is_broken(capsys, monkeypatch):
    monkeypatch.setattr(SpecWorkerBase, "_cleanup", lambda self, step, cause: None)
    code, out, _ = run_cli(capsys, "selftest", "--json")
    assert code == 1
    report = json.loads(out)
    assert report["ok"] is False and report["runs"]["guard template"]["verdict"] == "FAIL"
