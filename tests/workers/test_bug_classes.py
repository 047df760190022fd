"""The planted bug classes' registry (workers/bug_classes): each class declared once, and every list that names
classes (the fault points, the planted parts, `--inject`'s help, the selftest matrix, the docs' table) read from it;
and the class declared in a module of its own (correction_reads_next_row) acting on the verified tokens."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
import torch
from specdec_eval.evals.selftest import mutants
from specdec_eval.evals.selftest.mutants import run_matrix
from specdec_eval.workers import bug_classes, faults, planted
from specdec_eval.workers.bug_classes import correction_reads_next_row as corr
from specdec_eval.workers.engine_options import ENGINE_OPTIONS

from ..cli.test_run_cli import needs_shared_data
from ..evals.selftest.test_mutants import OPTIONS, TINY


def test_every_list_of_classes_is_the_registrys():
    declared = {c.name for c in bug_classes.PLANTED_CLASSES}
    assert set(faults.BEHAVIOUR_POINTS) == declared
    assert set(faults.RECURRING_POINTS) == declared - {"emit_rejected_draft"}
    assert set(faults.REJECTION_POINTS) == {
        c.name for c in bug_classes.PLANTED_CLASSES if c.spec_sampling == "rejection"
    }
    assert set(planted.VERIFIER_POINTS) | set(planted.TARGET_POINTS) <= declared
    (inject,) = [o for o in ENGINE_OPTIONS if o.name == "inject"]
    assert all(name in inject.help for name in declared)
    in_matrix = {c.name for c in bug_classes.PLANTED_CLASSES if c.in_matrix}
    assert in_matrix == set(mutants.CLASS_NAMES) - {mutants.SEED.name}
    for row in mutants.BUG_CLASSES:  # each row's line and catcher are its declaration's
        if row is not mutants.SEED:
            declared_class = bug_classes.BY_NAME[row.name]
            assert (row.what, row.catcher, row.inject) == (declared_class.help, declared_class.catcher, (row.name,))


def test_the_docs_table_has_one_row_per_class():
    table = bug_classes.markdown_table().splitlines()
    assert len(table) == 2 + len(bug_classes.PLANTED_CLASSES)
    assert any(line.startswith("| `correction_reads_next_row` | verifier | lossless |") for line in table)


def test_the_vllm_classes_are_declared_once_and_the_docs_table_is_theirs():
    from pathlib import Path

    from specdec_eval.evals.selftest import vllm_mutants

    declared = bug_classes.VLLM_CLASSES
    assert [(b.name, b.what, b.catcher) for b in vllm_mutants.VLLM_CLASSES] == [
        (c.name, c.help, c.catcher) for c in declared
    ]
    assert all(c.planted_at for c in declared)
    page = Path(__file__).resolve().parents[2] / "docs" / "findings" / "vllm-mutants.md"
    assert bug_classes.vllm_markdown_table() in page.read_text()


def test_a_declaration_names_where_it_acts_and_a_known_gate():
    with pytest.raises(ValueError, match="acts_in"):
        bug_classes.PlantedClass("x", ("sampler",), "lossless", "?")
    with pytest.raises(ValueError, match="catcher"):
        bug_classes.PlantedClass("x", ("verifier",), "luck", "?")


class _Faults:
    def __init__(self) -> None:
        self.fired: list[tuple[str, int]] = []

    def due(self, point: str, step: int) -> bool:
        self.fired.append((point, step))
        return True


def _item(drafts: list[int], greedy: bool = True):
    request = SimpleNamespace(draft_tokens=drafts, sampling=SimpleNamespace(greedy=greedy))
    return SimpleNamespace(is_context=False, num_new_tokens=1 + len(drafts), request=request)


def test_the_correction_is_read_one_row_late():
    """Request 0 drafted (5, 6) and had 5 accepted, 6 rejected: its correction must come from row 1 (token 7); the
    bug reads row 2 (token 9). Request 1 accepted every draft (a bonus token): untouched; so is a sampled one."""
    logits = torch.zeros(7, 10)
    for row, token in enumerate((5, 7, 9, 3, 4, 2, 8)):
        logits[row, token] = 1.0
    items = [_item([5, 6]), _item([3]), _item([2], greedy=False)]
    emitted = [[5, 7], [3, 4], [8]]
    fired = _Faults()
    assert corr.CLASS.after_verify(items, logits, emitted, fired, 4) == [[5, 9], [3, 4], [8]]
    assert fired.fired == [("correction_reads_next_row", 4)] and emitted == [[5, 7], [3, 4], [8]]


@needs_shared_data
def test_the_matrix_catches_the_class_and_misses_it_made_harmless(tmp_path, monkeypatch):
    """End to end on tiny (the matrix's default paired run): the class is caught by the lossless gate; with its
    code made harmless (it returns the tokens it was given) the same row shows MISSED, so the row is its code's."""
    (bug,) = [b for b in mutants.BUG_CLASSES if b.name == "correction_reads_next_row"]
    for side in ("planted", "harmless"):
        (tmp_path / side).mkdir()
    caught = run_matrix(TINY, OPTIONS, [bug], workdir=str(tmp_path / "planted"))
    assert caught["ok"] and caught["rows"][0]["result"] == "caught", caught["rows"]
    assert caught["rows"][0]["cells"]["lossless"]["verdict"] == "FAIL"
    harmless = dataclasses.replace(corr.CLASS, after_verify=lambda items, logits, emitted, faults, step: emitted)
    classes = tuple(harmless if c is corr.CLASS else c for c in bug_classes.PLANTED_CLASSES)
    monkeypatch.setattr(bug_classes, "PLANTED_CLASSES", classes)
    missed = run_matrix(TINY, OPTIONS, [bug], workdir=str(tmp_path / "harmless"))
    assert not missed["ok"] and missed["rows"][0]["result"] == "MISSED", missed["rows"]
