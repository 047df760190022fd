"""`specdec-eval engine info`: what a model needs and what the KV cache can hold under v1 and v2."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from . import options as o

app = typer.Typer(help="Inspect the engine without running it.", no_args_is_help=True)


@app.command("info")
def info(
    model: o.Model = o.E.model,
    dtype: o.DType = o.E.dtype,
    device: o.Device = o.E.device,
    device_memory: o.DeviceMemory = None,
    block_size: o.BlockSize = o.K.block_size,
    max_batch_size: o.MaxBatch = o.E.max_batch_size,
    max_num_tokens: o.MaxNumTokens = o.E.max_num_tokens,
    tp: o.TPSize = o.E.tp_size,
    draft_layers: Annotated[
        int, typer.Option("--draft-layers", min=0, max=1, help="Extra KV layers (1 for Eagle3).")
    ] = 0,
    draft_len: Annotated[
        int, typer.Option("--draft-len", "-k", min=0, max=16, help="Draft tokens per step (0: no spec-dec).")
    ] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Model shape, parameter count, valid TP sizes, and KV capacity (blocks, tokens, bytes) under v1 and v2.

    Example:  specdec-eval engine info --model smollm2 --device-memory 2GiB
    """
    from ..workers.memory.capacity import capacity_report

    base = o.engine_config(
        model=model,
        dtype=dtype,
        device=device,
        device_memory=device_memory,
        block_size=block_size,
        max_batch_size=max_batch_size,
        max_num_tokens=max_num_tokens,
        tp=tp,
    )
    report = capacity_report(base, draft_layers=draft_layers, draft_len=draft_len)
    if as_json:
        print(json.dumps(report, indent=2))
        return
    _print_report(report, max_batch_size)


def _print_report(report: dict, max_batch_size: int) -> None:
    r = report
    print(f"model      {r['model']} ({r['source']})")
    print(
        f"shape      {r['model_type']}, {r['layers']} layers, hidden {r['hidden_size']}, "
        f"{r['attention_heads']} heads / {r['kv_heads']} KV heads, head_dim {r['head_dim']}, "
        f"vocab {r['vocab_size']}"
    )
    print(f"parameters {r['parameters']:,}")
    print(f"TP sizes   {', '.join(map(str, r['valid_tp_sizes']))}")
    mem = report["memory"]
    print(
        f"memory     {report['device']} {report['dtype']}: total {mem['total_gib']} GiB, weights "
        f"{mem['weights_gib']} GiB, activations {mem['activation_gib']} GiB, free {mem['free_gib']} GiB"
    )
    for version, kv in report["kv_cache"].items():
        print(
            f"kv {version}      {kv['num_blocks']:,} blocks x {kv['block_size']} tokens = "
            f"{kv['max_tokens']:,} tokens, {kv['total_gib']} GiB "
            f"({kv['bytes_per_token']:,} B/token, {kv['num_layers']} layers)"
        )
        if version == "v1":
            print(
                f"           {kv['policy']}: {kv['full_length_requests_at_once']} requests of "
                f"{kv['request_tokens']} tokens at once"
            )
        else:
            print(
                f"           {kv['policy']}: {kv['headroom_blocks_at_max_batch']} blocks of headroom "
                f"at batch {max_batch_size}"
            )
    copy = report["decode_copy"]
    if copy["enabled"]:
        print(
            f"decode     a contiguous copy of the decoding requests' KV (no per-step block gather), at most "
            f"the pool's size ({copy['max_gib']} GiB) on top of the total above"
        )
    else:
        print("decode     gathers each decoding request's KV blocks every step (no decode copy)")
