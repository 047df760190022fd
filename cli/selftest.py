"""`specdec-eval selftest`: the canary A/B that proves the harness catches the failure it exists for.

Side by side, on the same prompts: a fault-free run; the unguarded worker (`--spec-guard none`) whose max-shape
warmup runs out of memory after it saved attention metadata, which must FAIL with the stale-state signature
(a spec_state_leak event naming the fields, failed requests); and the guarded worker (`--spec-guard template`)
under the same OOM, which must PASS with outputs identical to the fault-free run."""

from __future__ import annotations

import json
from typing import Annotated, Literal

import typer

from . import options as o
from .bench import BENCH_PROMPTS
from .progress import stderr


def selftest(
    mode: Annotated[
        Literal["inject", "budget"],
        typer.Option(
            "--mode",
            help="inject: an injected OOM in the max-shape warmup; budget: a real one, from a kv v2 byte quota "
            "that leaves less headroom than the Eagle3 draft pass needs.",
        ),
    ] = "inject",
    num_prompts: Annotated[
        int, typer.Option("--num-prompts", min=1, max=len(BENCH_PROMPTS), help="Prompts per run (built in).")
    ] = 4,
    max_new_tokens: Annotated[int, typer.Option("--max-new-tokens", "-n", min=1)] = 16,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    model: o.Model = "tiny",
    kv_cache: o.KVCache = "v2",
    draft_len: o.DraftLen = o.S.max_draft_len,
    device: o.Device = o.E.device,
    device_memory: o.DeviceMemory = "256MiB",
    max_num_tokens: o.MaxNumTokens = 256,
) -> None:
    """Run the canary A/B; exit 0 when the unguarded half fails as it should and the guarded half passes.

    Examples:
      specdec-eval selftest
      specdec-eval selftest --mode budget --json
      specdec-eval selftest --model smollm2 --device-memory 2GiB
    """
    from ..workers.canary import run_canary

    base = o.engine_config(
        model=model, kv_cache=kv_cache, device=device, device_memory=device_memory, max_num_tokens=max_num_tokens,
        spec="eagle3", draft_len=draft_len,
    )  # fmt: skip
    stderr.print(f"selftest: canary A/B on {model}, kv {kv_cache}, K={draft_len}, mode {mode} ...")
    report = run_canary(base, BENCH_PROMPTS[:num_prompts], max_new_tokens, mode)
    if as_json:
        print(json.dumps(report, indent=2))
    else:
        _print_table(report)
    if not report["ok"]:
        raise typer.Exit(1)


def _print_table(report: dict) -> None:
    runs = report["runs"]
    names = list(runs)
    rows = [
        ("spec guard", lambda r: r["guard"]),
        ("warmup_oom events", lambda r: r["events"].get("warmup_oom", 0)),
        ("spec_state_restored", lambda r: r["events"].get("spec_state_restored", 0)),
        ("spec_state_leak", lambda r: r["events"].get("spec_state_leak", 0)),
        ("leaked fields", lambda r: ", ".join(r["leaked_fields"]) or "-"),
        ("failed requests", lambda r: f"{r['failed']}/{r['requests']}"),
        ("identical to fault-free", lambda r: f"{r['identical']}/{r['requests']}"),
        ("expected", lambda r: r["expected"]),
        ("verdict", lambda r: r["verdict"]),
    ]
    width = max(len(n) for n in names) + 2
    print(f"{'':<26}" + "".join(f"{n:<{max(width, 34)}}" for n in names))
    for label, get in rows:
        print(f"{label:<26}" + "".join(f"{str(get(runs[n])):<{max(width, 34)}}" for n in names))
    if report.get("budget"):
        b = report["budget"]
        print(
            f"\nbudget mode: v2 quota {b['quota_bytes']:,} B leaves {b['headroom_bytes']:,} B of headroom; the draft "
            f"pass needs {b['draft_need_bytes']:,} B (target forward {b['target_need_bytes']:,} B)"
        )
    print(f"\nselftest {'PASSED' if report['ok'] else 'FAILED'}: {report['summary']}")
