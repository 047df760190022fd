"""Read a Hugging Face model folder: config.json plus safetensors (single file or sharded with an index).

Weights are read only from safetensors: pickled `pytorch_model.bin` files can run code when loaded, so a
folder that has only those is refused with a message saying how to convert it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ...errors import UserError
from ...user_files import read_limited_text
from .model_config import ModelConfig

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"
PICKLE_FILES = ("pytorch_model.bin", "pytorch_model.bin.index.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")
# Buffers some old checkpoints saved next to the weights; they are recomputed from the config, not loaded.
_DERIVED_SUFFIXES = ("rotary_emb.inv_freq",)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(read_limited_text(path, "checkpoint file"))  # a device: one line, never an endless read
    except json.JSONDecodeError as e:
        raise UserError(f"cannot read {path}: {e}") from None
    if not isinstance(data, dict):
        raise UserError(f"{path} is not a JSON object")
    return data


def read_config(folder: Path) -> ModelConfig:
    config = ModelConfig.from_hf_dict(_read_json(folder / "config.json"), name=folder.name)
    # Instruct models often list their end-of-turn token only in generation_config.json (Llama 3: <|eot_id|>).
    gen_path = folder / "generation_config.json"
    if gen_path.is_file():
        eos = _read_json(gen_path).get("eos_token_id")
        extra = eos if isinstance(eos, list) else ([] if eos is None else [eos])
        merged = tuple(dict.fromkeys([*config.eos_token_ids, *(int(e) for e in extra)]))
        config = replace(config, eos_token_ids=merged)
    return config


def weight_map(folder: Path) -> dict[str, Path]:
    """Tensor name -> safetensors file holding it. Raises UserError when the folder has no usable weights."""
    index = folder / INDEX_FILE
    if index.is_file():
        entries = _read_json(index).get("weight_map")
        if not isinstance(entries, dict) or not entries:
            raise UserError(f"{index} has no weight_map")
        files = {name: folder / fname for name, fname in entries.items()}
        missing = sorted({str(p.name) for p in files.values() if not p.is_file()})
        if missing:
            raise UserError(f"{folder}: shards listed in {INDEX_FILE} are missing: {', '.join(missing)}")
        return files
    single = folder / SINGLE_FILE
    if single.is_file():
        from safetensors import safe_open

        try:
            with safe_open(str(single), framework="pt") as f:
                return dict.fromkeys(f.keys(), single)
        except Exception as e:  # safetensors raises its own error type for corrupt headers
            raise UserError(f"cannot read {single}: {e}") from None
    if any((folder / name).is_file() for name in PICKLE_FILES):
        raise UserError(
            f"{folder} has only pytorch_model.bin weights (pickle, which can run code when loaded); "
            "convert them to model.safetensors first (transformers: save_pretrained(safe_serialization=True))"
        )
    raise UserError(f"{folder} has config.json but no {SINGLE_FILE} or {INDEX_FILE}")


def iter_tensors(folder: Path, config: ModelConfig) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield tensors in their stored dtype, one shard open at a time (safetensors memory-maps each file)."""
    from safetensors import safe_open

    by_file: dict[Path, list[str]] = {}
    for name, path in weight_map(folder).items():
        if name.endswith(_DERIVED_SUFFIXES):
            continue
        # Tied checkpoints sometimes store lm_head anyway; the model reuses embed_tokens, so do not load it.
        if config.tie_word_embeddings and name == "lm_head.weight":
            continue
        by_file.setdefault(path, []).append(name)
    for path, names in by_file.items():
        with safe_open(str(path), framework="pt") as f:
            for name in names:
                yield name, f.get_tensor(name)


def load_tokenizer(folder: Path) -> PreTrainedTokenizerBase:
    if not any((folder / name).is_file() for name in TOKENIZER_FILES):
        raise UserError(f"{folder} has no tokenizer files (looked for {', '.join(TOKENIZER_FILES)})")
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except (OSError, ValueError) as e:
        raise UserError(f"cannot load the tokenizer in {folder}: {e}") from None
