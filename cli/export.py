"""`specdec-eval export`: write a model the tool loads as a Hugging Face folder other engines can serve."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

from . import options as o


def export(
    out_dir: Annotated[Path, typer.Argument(help="Folder to write (created; must be empty unless --force).")],
    model: o.Model = o.E.model,
    dtype: Annotated[
        Literal["float32", "bfloat16", "float16"],
        typer.Option("--dtype", help="Weights' dtype in the folder (float32: what our engine runs exactly)."),
    ] = "float32",
    force: Annotated[bool, typer.Option("--force", help="Write into a folder that is not empty.")] = False,
) -> None:
    """Write --model (the embedded SmolLM2, a GGUF, the tiny preset, ...) as a Hugging Face folder: safetensors
    weights, config.json, tokenizer files and chat template, the layout vLLM, SGLang and TensorRT-LLM load. The
    weights are the ones our engine runs (a GGUF's dequantised tensors), so both engines judge the same model.

    Example:  specdec-eval export --model smollm2 smollm2-hf
    then:     python -m vllm.entrypoints.openai.api_server --model smollm2-hf --dtype float32
    """
    from ..records.folders import check_target

    check_target(out_dir, force)  # before loading anything: a refusal costs nothing

    import torch

    from ..workers.loading.hf_export import export_hf

    result = export_hf(model, out_dir, dtype=getattr(torch, dtype), force=force)
    template = "chat template" if result.has_chat_template else "no chat template"
    print(
        f"exported {result.source} to {result.folder} ({result.dtype}, "
        f"{result.weight_bytes / 2**20:.0f} MiB of weights, {template})"
    )
