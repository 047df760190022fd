"""`specdec-eval export`: the folder it writes loads back, through our own loader and through transformers, with the
very tensors the source had; a folder that holds something is refused in one line unless --force."""

from __future__ import annotations

import json

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
