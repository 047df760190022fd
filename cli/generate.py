"""`specdec-eval generate`: prompts in, JSON lines out. How a user sanity-checks the engine."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from ..errors import UserError
from ..records import atomic_write
from ..user_files import TEXT_LIMIT, decode_utf8, read_limited
from ..workers.config import SamplingParams
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
        if not isinstance(obj, dict):
            raise UserError(f"{source}:{number}: JSON line needs a 'prompt' string or a 'messages' list")
        if "messages" in obj:
            msgs = obj["messages"]
            if (
                not isinstance(msgs, list)
                or not msgs
                or not all(isinstance(m, dict) and isinstance(m.get("content"), str) for m in msgs)
            ):
                raise UserError(f"{source}:{number}: 'messages' must be a list of {{role, content}} objects")
            for m in msgs:
                _check_text(m["content"], f"{source}:{number}: a message's content")
            prompts.append(msgs)
        elif isinstance(obj.get("prompt"), str):
            _check_text(obj["prompt"], f"{source}:{number}: the prompt")
            prompts.append(obj["prompt"])
        else:
            raise UserError(f"{source}:{number}: JSON line needs a 'prompt' string or a 'messages' list")
    if not prompts:
        raise UserError(f"{source}: no prompts")
    return prompts


def _check_text(text: str, what: str) -> None:
    """JSON can spell a lone surrogate (\\ud800), which is half of a character and no text any tokenizer encodes."""
    for i, ch in enumerate(text):
        if "\ud800" <= ch <= "\udfff":
            raise UserError(
                f"{what} holds a lone surrogate \\u{ord(ch):04x} at character {i + 1}, which is not "
                "text (JSON spells a character outside the BMP as a surrogate pair)"
            )


def read_prompts_file(prompts_file: str) -> tuple[str, str]:
    """(text, name) of the prompts file, or of stdin for '-'; it must be UTF-8 (the error names line and column)."""
    if prompts_file == "-":
        stream = getattr(sys.stdin, "buffer", None)
        if stream is None:  # a text stream put in place of stdin (tests)
            return sys.stdin.read(), "stdin"
        data = stream.read(TEXT_LIMIT + 1)  # `generate - < /dev/zero` must end too
        if len(data) > TEXT_LIMIT:
            raise UserError(f"stdin holds more than the {TEXT_LIMIT // 2**20} MiB read as prompts")
        return decode_utf8(data, "stdin"), "stdin"
    path = Path(prompts_file)
    if path.is_dir():
        raise UserError(f"prompts file {prompts_file} is a folder; name a file of prompts, or '-' for stdin")
    if not path.exists():
        raise UserError(f"prompts file not found: {prompts_file}")
    data = read_limited(path, "prompts file")  # a device or a FIFO says what it is, and is never read whole
    return decode_utf8(data, prompts_file), prompts_file


def check_events_path(events: str | None) -> None:
    """--events names a file that can be appended to: not a folder, in a folder that is there and writable."""
    if not events:
        return
    path = Path(events).expanduser()
    if path.is_dir():
        raise UserError(f"--events {events} is a folder; name a file, e.g. {path / 'events.jsonl'}")
    parent = path.parent
    if not parent.is_dir():
        raise UserError(f"--events {events}: folder {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise UserError(f"--events {events}: not writable")


def _top_p(value: float) -> float:
    if not 0.0 < value <= 1.0:
        raise typer.BadParameter(f"must be in (0, 1], got {value}")
    return value


@o.engine_options()
def generate(
    prompts_file: Annotated[
        str,
        typer.Argument(
            help="File of prompts, or '-' for stdin: plain lines, or JSON lines with 'prompt' "
            "or 'messages' (chat template)."
        ),
    ] = "-",
    max_new_tokens: Annotated[
        int, typer.Option("--max-new-tokens", "-n", min=1, help="Tokens to generate.")
    ] = o.SP.max_new_tokens,
    temperature: Annotated[float, typer.Option("--temperature", min=0.0, help="0 = greedy.")] = o.SP.temperature,
    top_p: Annotated[float, typer.Option("--top-p", callback=_top_p, help="Nucleus mass, in (0, 1].")] = o.SP.top_p,
    top_k: Annotated[int, typer.Option("--top-k", min=0, help="0 = off.")] = o.SP.top_k,
    stop: Annotated[list[str] | None, typer.Option("--stop", help="Stop string (repeatable).")] = None,
    ignore_eos: Annotated[bool, typer.Option("--ignore-eos", help="Keep going past EOS.")] = False,
    chat: Annotated[bool, typer.Option("--chat", help="Wrap plain-line prompts in the chat template.")] = False,
    engine_flags: o.EngineFlags | None = None,  # every engine option (`options`)
) -> None:
    """Generate completions and print one JSON object per prompt (text, token ids, finish reason, stats).

    Examples:
      echo "The capital of France is" | specdec-eval generate -n 16
      specdec-eval generate prompts.txt --spec eagle3 --draft-len 3 --kv-cache v2
      specdec-eval generate p.txt --spec eagle3 --spec-guard none --warmup on --inject warmup_oom   # the canary
    """
    from ..launch.dist import RankEnv, world_session
    from ..launch.layout import Layout
    from ..workers.engine.engine import Engine
    from ..workers.events import merge_event_files, rank_events_path
    from ..workers.loading.checkpoint import load_checkpoint
    from ..workers.memory.device import resolve_device

    flags = engine_flags
    model, tp, events = flags["model"], flags["tp"], flags["events_path"]
    check_events_path(events)
    text, source = read_prompts_file(prompts_file)
    prompts = read_prompts(text, source)
    if chat:
        prompts = [[{"role": "user", "content": p}] if isinstance(p, str) else p for p in prompts]
    sampling = SamplingParams(
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        top_p=top_p,
        top_k=top_k,
        stop=tuple(stop or ()),
        ignore_eos=ignore_eos,
    )
    checkpoint = load_checkpoint(model)
    checkpoint.config.check_tp_size(tp)
    env = RankEnv.from_environ()
    if tp > 1 and env.world_size != tp:
        raise UserError(
            f"--tp {tp} needs {tp} processes; start this command with "
            f"`torchrun --nproc-per-node {tp} -m specdec_eval.cli.main ...`"
        )
    config = flags.config(events_path=rank_events_path(events, tp))
    if config.spec is not None:  # a bad head folder: one line now, not a traceback from the engine build
        from ..workers.loading.checkpoint import preset_of
        from ..workers.spec.head_check import check_draft_model

        check_draft_model(config.spec, checkpoint.config, preset_of(checkpoint) or model)
    with world_session(env, resolve_device(flags["device"]).type, Layout(tp, tp)) as world:  # NCCL on CUDA, gloo on CPU
        tp_group = world.tp
        engine = Engine.build(config, tp_group, checkpoint)
        with generation_progress(len(prompts), enabled=tp_group.is_leader) as progress:
            outputs = engine.generate(prompts, sampling, progress=progress)
        if events and tp > 1:
            tp_group.barrier()  # every rank has written its last event before rank 0 merges the files
        if not tp_group.is_leader:
            return
        _print_outputs(prompts, outputs)
        if events and tp > 1:  # rank 0 merges every rank's file into the one the user named
            merged = merge_event_files([rank_events_path(events, tp).format(rank=r) for r in range(tp)])
            atomic_write(events, "".join(json.dumps(e) + "\n" for e in merged).encode("utf-8"))
        s = engine.last_stats
        _print_stats(engine, config)
    if s.num_failed:
        raise typer.Exit(1)  # failed requests are never a normal result


def _print_outputs(prompts: list, outputs: list) -> None:
    """One JSON line per prompt on stdout, in prompt order."""
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


def _print_stats(engine, config) -> None:
    """The run's totals, events, failures and acceptance on stderr (stdout stays JSON lines)."""
    s = engine.last_stats
    print(
        f"{s.num_requests} requests, {s.num_output_tokens} tokens in {s.elapsed_s:.2f} s "
        f"({s.output_tokens_per_s:.1f} tok/s), {s.num_steps} steps, kv {config.kv_cache.version}, "
        f"{engine.device.type} {str(engine.dtype).removeprefix('torch.')}",
        file=sys.stderr,
    )
    counts = engine.events.counts()
    if counts:
        print("events: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())), file=sys.stderr)
    if s.num_failed:
        print(f'{s.num_failed} of {s.num_requests} requests FAILED (finish_reason "error")', file=sys.stderr)
    if s.acceptance:
        a = s.acceptance
        per_pos = ", ".join(f"{x:.2f}" for x in a["per_position_rate"])
        print(
            f"{engine.config.spec.algorithm} K={a['max_draft_len']}: acceptance length {a['acceptance_length']:.3f} "
            f"(incl. bonus token), acceptance rate {a['acceptance_rate']:.3f}, per position [{per_pos}], "
            f"{a['num_cycles']} draft cycles",
            file=sys.stderr,
        )
