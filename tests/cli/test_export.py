"""`specdec-eval export`: the folder it writes loads back, through our own loader and through transformers, with the
very tensors the source had; a folder that holds something is refused in one line unless --force."""

from __future__ import annotations

import json

import pytest
import torch
from specdec_eval.workers.loading.checkpoint import load_checkpoint

from ..cli_helpers import run_cli


def test_export_writes_a_folder_that_loads_back_with_the_same_weights(tmp_path, capsys):
    out = tmp_path / "tiny-hf"
    code, stdout, err = run_cli(capsys, "export", "--model", "tiny", str(out))
    assert code == 0, err
    assert "exported preset:tiny" in stdout and "float32" in stdout
    assert json.loads((out / "config.json").read_text())["architectures"]
    assert (out / "model.safetensors").is_file() and (out / "tokenizer_config.json").is_file()

    source, exported = load_checkpoint("tiny"), load_checkpoint(str(out))
    assert exported.config.to_hf_dict() == source.config.to_hf_dict()
    theirs = exported.state_dict()
    ours = source.state_dict()
    assert set(theirs) == set(ours)
    for name, tensor in ours.items():  # a copy, not a computation: exact
        assert torch.equal(theirs[name].float(), tensor.float()), name
    tokenizer = exported.load_tokenizer()
    assert tokenizer("hello world")["input_ids"] == source.load_tokenizer()("hello world")["input_ids"]

    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(str(out))
    assert model.dtype == torch.float32


def test_export_refuses_a_folder_that_is_not_empty(tmp_path, capsys):
    (tmp_path / "keep.txt").write_text("mine")
    code, _, err = run_cli(capsys, "export", "--model", "tiny", str(tmp_path))
    assert code == 2
    assert err.count("\n") == 1 and "not empty" in err and "--force" in err
    assert (tmp_path / "keep.txt").read_text() == "mine"  # nothing lost
    code, _, err = run_cli(capsys, "export", "--model", "tiny", str(tmp_path), "--force")
    assert code == 0, err and (tmp_path / "config.json").is_file()


def test_export_refuses_a_file_and_an_unknown_model(tmp_path, capsys):
    target = tmp_path / "a-file"
    target.write_text("x")
    code, _, err = run_cli(capsys, "export", "--model", "tiny", str(target))
    assert code == 2 and "is a file" in err
    code, _, err = run_cli(capsys, "export", "--model", str(tmp_path / "nope"), str(tmp_path / "out"))
    assert code == 2 and "not found" in err and err.count("\n") == 1


def test_force_leaves_no_file_of_an_earlier_export_and_every_file_has_one_mode(tmp_path, capsys):
    out = tmp_path / "tiny-hf"
    out.mkdir()
    (out / "model-00001-of-00002.safetensors").write_bytes(b"old shard")  # an earlier, sharded export
    (out / "model.safetensors.index.json").write_text('{"weight_map": {"x": "model-00002-of-00002.safetensors"}}')
    (out / "notes.txt").write_text("mine")
    code, _, err = run_cli(capsys, "export", "--model", "tiny", str(out), "--force")
    assert code == 0, err
    names = {p.name for p in out.iterdir()}
    assert "model.safetensors.index.json" not in names and "model-00001-of-00002.safetensors" not in names
    assert "notes.txt" in names and not [n for n in names if n.startswith(".")]  # no staging folder left
    modes = {p.name: p.stat().st_mode & 0o777 for p in out.iterdir() if p.name != "notes.txt"}
    assert len(set(modes.values())) == 1, modes
    assert load_checkpoint(str(out)).state_dict()  # the tool loads its own export again


@pytest.mark.parametrize("where", ["dangling", "under-a-file", "proc"])
def test_a_destination_that_cannot_be_written_is_one_line_before_the_model_loads(tmp_path, capsys, where, monkeypatch):
    from specdec_eval.workers.loading import hf_export

    def never(*a, **k):
        raise AssertionError("the model was loaded before the destination was checked")

    monkeypatch.setattr(hf_export, "load_checkpoint", never)
    if where == "dangling":
        target = tmp_path / "link"
        target.symlink_to(tmp_path / "missing")
    elif where == "under-a-file":
        (tmp_path / "a-file").write_text("x")
        target = tmp_path / "a-file" / "out"
    else:
        target = "/proc/self/x"
    code, _, err = run_cli(capsys, "export", "--model", "tiny", str(target))
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
