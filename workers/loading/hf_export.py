"""Write any checkpoint the tool loads as a Hugging Face folder (config.json, safetensors, tokenizer files, chat
template), so that other engines (vLLM, SGLang, TensorRT-LLM) serve the very weights our engine runs.

The weights go through the same `build_hf_model` our transformers reference uses, so a GGUF's dequantised tensors
are written as they are, in float32 unless told otherwise."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from ...records.folders import staged_folder
from .checkpoint import load_checkpoint
from .hf_reference import build_hf_model


@dataclass(frozen=True)
class ExportResult:
    folder: Path
    source: str
    dtype: str
    weight_bytes: int
    has_chat_template: bool


# An earlier export's weights that the new one may not overwrite by name (one file then, shards now, or the
# reverse): left behind, a shard index would name shards that are gone.
STALE_WEIGHTS = ("*.safetensors", "*.safetensors.index.json", "pytorch_model*.bin", "pytorch_model.bin.index.json")


def export_hf(model: str, folder: Path, dtype: torch.dtype = torch.float32, force: bool = False) -> ExportResult:
    """Write `model` into `folder` through the record layer: staged beside it (a place that cannot be written is
    refused before the model loads), every file with one mode, an earlier export's weights and index removed."""
    with staged_folder(folder, force, STALE_WEIGHTS) as staging:
        checkpoint = load_checkpoint(model)
        tokenizer = checkpoint.load_tokenizer()
        hf_model = build_hf_model(checkpoint, dtype=dtype)
        hf_model.save_pretrained(str(staging), safe_serialization=True)
        tokenizer.save_pretrained(str(staging))
        weight_bytes = sum(p.stat().st_size for p in staging.glob("*.safetensors"))
    return ExportResult(
        folder=folder,
        source=checkpoint.source,
        dtype=str(dtype).removeprefix("torch."),
        weight_bytes=weight_bytes,
        has_chat_template=bool(getattr(tokenizer, "chat_template", None)),
    )
