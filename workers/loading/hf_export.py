"""Write any checkpoint the tool loads as a Hugging Face folder (config.json, safetensors, tokenizer files, chat
template), so that other engines (vLLM, SGLang, TensorRT-LLM) serve the very weights our engine runs.

The weights go through the same `build_hf_model` our transformers reference uses, so a GGUF's dequantised tensors
are written as they are, in float32 unless told otherwise."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from ...errors import UserError
from .checkpoint import load_checkpoint
from .hf_reference import build_hf_model


@dataclass(frozen=True)
class ExportResult:
    folder: Path
    source: str
    dtype: str
    weight_bytes: int
    has_chat_template: bool


def check_target(folder: Path, force: bool) -> None:
    """Refuse a file, or a folder that already holds something (unless `force`): an export never mixes with
    older files."""
    if folder.exists() and not folder.is_dir():
        raise UserError(f"{folder} is a file; give a folder to export into")
    if folder.is_dir() and any(folder.iterdir()) and not force:
        raise UserError(f"{folder} is not empty; choose an empty folder or pass --force to overwrite")


def export_hf(model: str, folder: Path, dtype: torch.dtype = torch.float32, force: bool = False) -> ExportResult:
    check_target(folder, force)
    checkpoint = load_checkpoint(model)
    tokenizer = checkpoint.load_tokenizer()
    hf_model = build_hf_model(checkpoint, dtype=dtype)
    folder.mkdir(parents=True, exist_ok=True)
    hf_model.save_pretrained(str(folder), safe_serialization=True)
    tokenizer.save_pretrained(str(folder))
    weight_bytes = sum(p.stat().st_size for p in folder.glob("*.safetensors"))
    return ExportResult(
        folder=folder,
        source=checkpoint.source,
        dtype=str(dtype).removeprefix("torch."),
        weight_bytes=weight_bytes,
        has_chat_template=bool(getattr(tokenizer, "chat_template", None)),
    )
