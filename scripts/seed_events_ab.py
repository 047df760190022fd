"""The seed's A/B through HTTP, as a TensorRT-LLM user would run it: each side a server that the endpoint engine
starts itself (`serve_cmd`), whose log it follows from the start, warmup included. Unguarded side: `specdec-eval
serve --spec eagle3 --inject warmup_oom --spec-guard none --warmup on`; guarded side: the same with
`--spec-guard template`. Prints, per side, the events read from the server's log and those of the client, the
verdict the events give (FAIL on any failing event, specdec_eval/event_types.py), and the wall time.

    .venv/bin/python scripts/seed_events_ab.py                      # tiny model, 8 prompts, 16 tokens
    .venv/bin/python scripts/seed_events_ab.py --model smollm2 --device-memory 2GiB --prompts 8

Phase 2 wires the same as `run --endpoint URL --serve-cmd "..."`; this script drives the endpoint engine directly."""

from __future__ import annotations

import argparse
import shlex
import socket
import sys
import time
from collections import Counter

from specdec_eval.workers.config import SamplingParams
from specdec_eval.workers.remote.endpoint import EndpointEngine
from specdec_eval.workers.remote.endpoint_config import EndpointConfig

from specdec_eval.event_types import FAILING_EVENTS


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def side(guard: str, args: argparse.Namespace) -> dict:
    port = free_port()
    command = (f"{shlex.quote(sys.executable)} -m specdec_eval.cli.main serve --model {args.model} "
               f"--device-memory {args.device_memory} --spec eagle3 --inject warmup_oom --spec-guard {guard} "
               f"--warmup on --port {port}")  # fmt: skip
    started = time.perf_counter()
    engine = EndpointEngine(EndpointConfig(url=f"http://127.0.0.1:{port}", serve_cmd=command, model=args.model,
                                           spec="eagle3", max_draft_len=3, concurrency=4, startup_timeout_s=600,
                                           stall_floor_s=30))  # fmt: skip
    ready = time.perf_counter() - started
    prompts = [f"Question: what is {7 * i + 3} + {i + 12}? Answer:" for i in range(args.prompts)]
    try:
        start = time.perf_counter()
        outputs = engine.generate(prompts, SamplingParams(max_new_tokens=args.max_tokens))
        took = time.perf_counter() - start
        events = engine.collect_events()
        server = dict(engine.identity.server)
    finally:
        engine.close()
    return {"guard": guard, "ready_s": ready, "run_s": took, "events": events, "server": server,
            "failed": sum(o.finish_reason == "error" for o in outputs), "n": len(outputs)}  # fmt: skip


def show(result: dict) -> None:
    events = result["events"]
    failing = [e for e in events if e["type"] in FAILING_EVENTS]
    verdict = "FAIL" if failing else "PASS"
    print(
        f"\n== --spec-guard {result['guard']}: {verdict} ({len(failing)} failing events; {result['failed']}/"
        f"{result['n']} requests failed; server up in {result['ready_s']:.1f} s, run {result['run_s']:.1f} s)"
    )
    server = result["server"]
    print(f"   server: {server.get('command')}\n   log: {server.get('log')} (table {server.get('log_format')}: "
          f"{server.get('log_format_from')})")  # fmt: skip
    counts = Counter((e["type"], e.get("source", "client")) for e in events)
    print(f"   {'event':22} {'from':11} {'count':>5}  {'fails':5}  first (log line: message)")
    for (type_, source), n in sorted(counts.items()):
        first = next(e for e in events if e["type"] == type_ and e.get("source", "client") == source)
        where = f"{first['line']}: {first.get('message', '')}" if "line" in first else \
            str(first.get("reason") or first.get("error") or "")[:80]  # fmt: skip
        print(f"   {type_:22} {source:11} {n:5d}  {'yes' if type_ in FAILING_EVENTS else '':5}  {where[:90]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--device-memory", default="256MiB")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=16)
    args = parser.parse_args()
    for guard in ("none", "template"):
        show(side(guard, args))


if __name__ == "__main__":
    main()
