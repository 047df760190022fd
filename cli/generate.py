"""`specdec-eval generate`: prompts in, JSON lines out. How a user sanity-checks the engine."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from ..workers.config import SamplingParams
from ..workers.errors import UserError
from . import options as o
from .progress import generation_progress


def read_prompts(text: str, source: str) -> list:
    """Plain lines are prompts; a line starting with '{' is JSON with "prompt" or "messages" (chat)."""
    prompts: list = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if not line.lstrip().startswith("{"):
            prompts.append(line)
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise UserError(f"{source}:{number}: not valid JSON ({e.msg})") from None
        if "messages" in obj:
            msgs = obj["messages"]
            if not isinstance(msgs, list) or not all(isinstance(m, dict) and "content" in m for m in msgs):
                raise UserError(f"{source}:{number}: 'messages' must be a list of {{role, content}} objects")
            prompts.append(msgs)
        elif isinstance(obj.get("prompt"), str):
            prompts.append(obj["prompt"])
        else:
            raise UserError(f"{source}:{number}: JSON line needs a 'prompt' string or a 'messages' list")
    if not prompts:
        raise UserError(f"{source}: no prompts")
    return prompts


def _rank_events_path(events: str | None, tp: int) -> str | None:
    if not events or tp == 1:
        return events
    p = Path(events)
    return str(p.with_name(f"{p.stem}.rank{{rank}}{p.suffix or '.jsonl'}"))


def generate(
    prompts_file: Annotated[
        str,
        typer.Argument(
            help="File of prompts, or '-' for stdin: plain lines, or JSON lines with 'prompt' "
            "or 'messages' (chat template)."
        ),
    ] = "-",
    max_new_tokens: Annotated[
        int, typer.Option("--max-new-tokens", "-n", help="Tokens to generate.")
    ] = o.SP.max_new_tokens,
    temperature: Annotated[float, typer.Option(help="0 = greedy.")] = o.SP.temperature,
    top_p: Annotated[float, typer.Option("--top-p")] = o.SP.top_p,
    top_k: Annotated[int, typer.Option("--top-k", help="0 = off.")] = o.SP.top_k,
    stop: Annotated[list[str] | None, typer.Option("--stop", help="Stop string (repeatable).")] = None,
    ignore_eos: Annotated[bool, typer.Option("--ignore-eos", help="Keep going past EOS.")] = False,
    chat: Annotated[bool, typer.Option("--chat", help="Wrap plain-line prompts in the chat template.")] = False,
    model: o.Model = o.E.model,
    kv_cache: o.KVCache = o.K.version,
    dtype: o.DType = o.E.dtype,
    device: o.Device = o.E.device,
    device_memory: o.DeviceMemory = None,
    block_size: o.BlockSize = o.K.block_size,
    block_reuse: o.BlockReuse = o.K.enable_block_reuse,
    decode_copy: o.DecodeCopy = o.K.decode_copy,
    max_batch_size: o.MaxBatch = o.E.max_batch_size,
    max_num_tokens: o.MaxNumTokens = o.E.max_num_tokens,
    max_seq_len: o.MaxSeqLen = None,
    tp: o.TPSize = o.E.tp_size,
    seed: o.Seed = o.E.seed,
    spec: o.Spec = "none",
    draft_len: o.DraftLen = o.S.max_draft_len,
    draft_model: o.DraftModel = o.S.draft_model,
    spec_guard: o.SpecGuard = o.S.guard,
    capture_layers: o.CaptureLayers = None,
    inject: o.Inject = None,
    max_retries: o.MaxRetries = o.E.max_retries,
    warmup: o.Warmup = o.E.warmup,
    events: o.EventsPath = None,
) -> None:
    """Generate completions and print one JSON object per prompt (text, token ids, finish reason, stats).

    Examples:
      echo "The capital of France is" | specdec-eval generate -n 16
      specdec-eval generate prompts.txt --spec eagle3 --draft-len 3 --kv-cache v2
      specdec-eval generate p.txt --spec eagle3 --spec-guard none --warmup on --inject warmup_oom   # the canary
    """  # fmt: skip
    from ..launch.dist import RankEnv, world_session
    from ..launch.layout import Layout
    from ..workers.checkpoint import load_checkpoint
    from ..workers.device import resolve_device
    from ..workers.engine import Engine
    from ..workers.events import merge_event_files

    if prompts_file == "-":
        text, source = sys.stdin.read(), "stdin"
    else:
        path = Path(prompts_file)
        if not path.is_file():
            raise UserError(f"prompts file not found: {prompts_file}")
        text, source = path.read_text(encoding="utf-8"), prompts_file
    prompts = read_prompts(text, source)
    if chat:
        prompts = [[{"role": "user", "content": p}] if isinstance(p, str) else p for p in prompts]
    sampling = SamplingParams(
        max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, top_k=top_k,
        stop=tuple(stop or ()), ignore_eos=ignore_eos,
    )  # fmt: skip
    checkpoint = load_checkpoint(model)
    checkpoint.config.check_tp_size(tp)
    env = RankEnv.from_environ()
    if tp > 1 and env.world_size != tp:
        raise UserError(
            f"--tp {tp} needs {tp} processes; start this command with "
            f"`torchrun --nproc-per-node {tp} -m specdec_eval.cli.main ...`"
        )
    config = o.engine_config(
        model=model, kv_cache=kv_cache, dtype=dtype, device=device, device_memory=device_memory,
        block_size=block_size, block_reuse=block_reuse, decode_copy=decode_copy, max_batch_size=max_batch_size,
        max_num_tokens=max_num_tokens, max_seq_len=max_seq_len, tp=tp, seed=seed,
        spec=spec, draft_len=draft_len, draft_model=draft_model, spec_guard=spec_guard, capture_layers=capture_layers,
        inject=inject, max_retries=max_retries, warmup=warmup, events_path=_rank_events_path(events, tp),
    )  # fmt: skip
    with world_session(env, resolve_device(device).type, Layout(tp, tp)) as world:  # NCCL on CUDA, gloo on CPU
        tp_group = world.tp
        engine = Engine(config, tp_group, checkpoint)
        with generation_progress(len(prompts), enabled=tp_group.is_leader) as progress:
            outputs = engine.generate(prompts, sampling, progress=progress)
        if events and tp > 1:
            tp_group.barrier()  # every rank has written its last event before rank 0 merges the files
        if not tp_group.is_leader:
            return
        for prompt, out in zip(prompts, outputs, strict=True):
            record = {
                "index": out.index,
                "prompt": prompt,
                "text": out.text,
                "token_ids": out.token_ids,
                "finish_reason": out.finish_reason,
                **({"error": out.error} if out.error else {}),
                "stats": out.stats,
            }
            print(json.dumps(record, ensure_ascii=False))
        s = engine.last_stats
        print(
            f"{s.num_requests} requests, {s.num_output_tokens} tokens in {s.elapsed_s:.2f} s "
            f"({s.output_tokens_per_s:.1f} tok/s), {s.num_steps} steps, kv {config.kv_cache.version}, "
            f"{engine.device.type} {str(engine.dtype).removeprefix('torch.')}",
            file=sys.stderr,
        )
        if events and tp > 1:  # rank 0 merges every rank's file into the one the user named
            merged = merge_event_files([_rank_events_path(events, tp).format(rank=r) for r in range(tp)])
            Path(events).write_text("".join(json.dumps(e) + "\n" for e in merged), encoding="utf-8")
        counts = engine.events.counts()
        if counts:
            print("events: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())), file=sys.stderr)
        if s.num_failed:
            print(f'{s.num_failed} of {s.num_requests} requests FAILED (finish_reason "error")', file=sys.stderr)
        if s.acceptance:
            a = s.acceptance
            per_pos = ", ".join(f"{x:.2f}" for x in a["per_position_rate"])
            print(
                f"eagle3 K={a['max_draft_len']}: acceptance length {a['acceptance_length']:.3f} (incl. bonus token), "
                f"acceptance rate {a['acceptance_rate']:.3f}, per position [{per_pos}], {a['num_cycles']} draft cycles",
                file=sys.stderr,
            )
    if s.num_failed:
        raise typer.Exit(1)  # failed requests are never a normal result
