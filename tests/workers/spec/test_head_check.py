"""A spec-dec configuration's draft head is checked before anything runs (workers/spec/head_check.py): the folder,
its config.json against the target, and its tensor names and shapes from the file's header."""

from __future__ import annotations

import json
import pickle

import pytest
import torch
from specdec_eval.workers.config import SpecConfig
from specdec_eval.workers.loading.presets import tiny_config
from specdec_eval.workers.spec.eagle3_head import Eagle3DraftModel, Eagle3HeadConfig, save_head_folder
from specdec_eval.workers.spec.head_check import check_draft_model

from specdec_eval.errors import UserError

TARGET = tiny_config()


@pytest.fixture(scope="module")
def good_head(tmp_path_factory):
    model = Eagle3DraftModel(Eagle3HeadConfig.for_target(TARGET))
    model.init_random(0)
    return save_head_folder(model, tmp_path_factory.mktemp("head") / "good")


def check(folder, **spec):
    check_draft_model(SpecConfig(draft_model=str(folder), **spec), TARGET, "tiny")


def test_a_good_head_and_the_defaults_pass(good_head):
    check(good_head)
    check_draft_model(SpecConfig(), TARGET, "tiny")  # auto = the random head for tiny
    check_draft_model(SpecConfig(draft_model="random"), TARGET, "tiny")


def test_capture_layers_out_of_range(good_head):
    with pytest.raises(UserError, match=r"capture layers \[9\] out of range for a 6-layer target"):
        check(good_head, capture_layers=(1, 2, 9))
    with pytest.raises(UserError, match="out of range"):
        check_draft_model(SpecConfig(draft_model="random", capture_layers=(1, 2, 9)), TARGET, "tiny")


def _copy(good_head, tmp_path, name="bad"):
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text((good_head / "config.json").read_text())
    return folder


def test_bad_folders_name_the_file(good_head, tmp_path):
    with pytest.raises(UserError, match="draft model folder not found"):
        check(tmp_path / "nope")
    folder = _copy(good_head, tmp_path)
    with pytest.raises(UserError, match="has no model.safetensors or pytorch_model.bin"):
        check(folder)
    (folder / "config.json").write_text('{"hidden_size": ')
    with pytest.raises(UserError, match=r"config.json:1:17: not valid JSON"):
        check(folder)
    (folder / "config.json").write_text(json.dumps({"hidden_size": 64}))
    with pytest.raises(UserError, match=r"config.json: config of eagle3-head lacks required field"):
        check(folder)
    cfg = json.loads((good_head / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**cfg, "vocab_size": 999}))
    with pytest.raises(UserError, match="draft head vocab 999 != target vocab"):
        check(folder)


def test_tensors_are_matched_by_name_and_shape(good_head, tmp_path):
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(good_head / "model.safetensors"))
    folder = _copy(good_head, tmp_path)
    save_file({**tensors, "bogus.weight": torch.zeros(2)}, str(folder / "model.safetensors"))
    with pytest.raises(UserError, match="tensor 'bogus.weight' .* is not part of an Eagle3 head"):
        check(folder)
    save_file({k: v for k, v in tensors.items() if k != "fc.weight"}, str(folder / "model.safetensors"))
    with pytest.raises(UserError, match="lacks tensors: fc.weight"):
        check(folder)
    save_file({**tensors, "fc.weight": torch.zeros(3, 3)}, str(folder / "model.safetensors"))
    with pytest.raises(UserError, match=r"draft tensor fc.weight .* shape \(3, 3\) != \(64, 192\)"):
        check(folder)
    (folder / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{broken")
    with pytest.raises(UserError, match="not a readable safetensors file"):
        check(folder)


def test_a_pytorch_bin_head_is_read_with_weights_only(good_head, tmp_path):
    from safetensors.torch import load_file

    folder = _copy(good_head, tmp_path)
    torch.save(load_file(str(good_head / "model.safetensors")), folder / "pytorch_model.bin")
    check(folder)

    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    (folder / "pytorch_model.bin").write_bytes(pickle.dumps({"fc.weight": Evil()}))
    with pytest.raises(UserError, match="cannot load with weights_only=True"):
        check(folder)
    assert not marker.exists()
