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
    from ..workers.capacity import plan_capacity
    from ..workers.checkpoint import load_checkpoint

    ckpt = load_checkpoint(model)
    cfg = ckpt.config
    cfg.check_tp_size(tp)
    report: dict = {
        "model": model,
        "source": ckpt.source,
        "model_type": cfg.model_type,
        "layers": cfg.num_hidden_layers,
        "hidden_size": cfg.hidden_size,
        "attention_heads": cfg.num_attention_heads,
        "kv_heads": cfg.num_key_value_heads,
        "head_dim": cfg.head_dim,
        "vocab_size": cfg.vocab_size,
        "parameters": cfg.num_parameters(),
        "valid_tp_sizes": cfg.valid_tp_sizes(),
        "kv_cache": {},
    }
    for version in ("v1", "v2"):
        engine_cfg = o.engine_config(
            model=model, kv_cache=version, dtype=dtype, device=device, device_memory=device_memory,
            block_size=block_size, max_batch_size=max_batch_size, max_num_tokens=max_num_tokens, tp=tp,
        )  # fmt: skip
        plan = plan_capacity(cfg, engine_cfg, num_extra_layers=draft_layers)
        report["device"] = plan.device
        report["dtype"] = plan.dtype
        report["memory"] = plan.memory_summary()
        kv = plan.layout_summary()
        # What the two reservation policies make of the same pool, for requests of the full max_seq_len.
        seq_len = min(engine_cfg.max_seq_len or 4096, cfg.max_position_embeddings)
        blocks_per_seq = -(-seq_len // block_size)
        if version == "v1":
            kv["policy"] = "whole sequence reserved at admission"
            kv["full_length_requests_at_once"] = kv["num_blocks"] // blocks_per_seq
        else:
            kv["policy"] = "blocks on demand; one window reserved per live request, preempt when out"
            kv["headroom_blocks_at_max_batch"] = max_batch_size * -(-(1 + draft_len) // block_size)
        report["kv_cache"][version] = kv
    wanted = engine_cfg.kv_cache.decode_copy
    # workers/kv_cache/decode_copy.py: bounded by the pool's token capacity, not part of the budget above.
    report["decode_copy"] = {
        "enabled": wanted if wanted is not None else report["device"] == "cpu",
        "max_gib": report["kv_cache"]["v1"]["total_gib"],
    }
    if as_json:
        print(json.dumps(report, indent=2))
        return
    print(f"model      {model} ({ckpt.source})")
    print(f"shape      {cfg.model_type}, {cfg.num_hidden_layers} layers, hidden {cfg.hidden_size}, "
          f"{cfg.num_attention_heads} heads / {cfg.num_key_value_heads} KV heads, head_dim {cfg.head_dim}, "
          f"vocab {cfg.vocab_size}")  # fmt: skip
    print(f"parameters {cfg.num_parameters():,}")
    print(f"TP sizes   {', '.join(map(str, cfg.valid_tp_sizes()))}")
    mem = report["memory"]
    print(f"memory     {report['device']} {report['dtype']}: total {mem['total_gib']} GiB, weights "
          f"{mem['weights_gib']} GiB, activations {mem['activation_gib']} GiB, free {mem['free_gib']} GiB")  # fmt: skip
    for version, kv in report["kv_cache"].items():
        print(f"kv {version}      {kv['num_blocks']:,} blocks x {kv['block_size']} tokens = "
              f"{kv['max_tokens']:,} tokens, {kv['total_gib']} GiB "
              f"({kv['bytes_per_token']:,} B/token, {kv['num_layers']} layers)")  # fmt: skip
        if version == "v1":
            print(f"           {kv['policy']}: {kv['full_length_requests_at_once']} requests of "
                  f"{seq_len} tokens at once")  # fmt: skip
        else:
            print(f"           {kv['policy']}: {kv['headroom_blocks_at_max_batch']} blocks of headroom "
                  f"at batch {max_batch_size}")  # fmt: skip
    copy = report["decode_copy"]
    if copy["enabled"]:
        print(f"decode     a contiguous copy of the decoding requests' KV (no per-step block gather), at most "
              f"the pool's size ({copy['max_gib']} GiB) on top of the total above")  # fmt: skip
    else:
        print("decode     gathers each decoding request's KV blocks every step (no decode copy)")
