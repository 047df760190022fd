"""Two `specdec-eval serve` servers side by side, each started by the endpoint engine itself (`serve_cmd`), which
follows the server's log from its start (warmup included) and reads its KV usage, as a TensorRT-LLM user's run would
treat trtllm-serve. Prints, per side, the events read from the server's log and the client's own, the verdict the
events give (FAIL on any failing event, specdec_eval/event_types.py), and the wall times.

Cases:
  seed     --spec-guard none vs template, both with --inject warmup_oom --warmup on: the unguarded side must FAIL
           (warmup_oom and spec_state_leak from its log), the guarded one PASS (warmup_oom, spec_state_restored)
  kv-leak  --inject rewind_leaks_blocks vs the same server without it (kv v2): the leaking side must FAIL
           (kv_block_leak from its log, kv_leak from its KV-usage metric), the clean one PASS

    .venv/bin/python scripts/serve_events_ab.py                       # the seed, tiny model, 8 prompts, 16 tokens
    .venv/bin/python scripts/serve_events_ab.py --case kv-leak --max-tokens 32
    .venv/bin/python scripts/serve_events_ab.py --model smollm2 --device-memory 2GiB

The same through the command line: `specdec-eval run --endpoint URL --serve-cmd "specdec-eval serve ... --port P"`
(README, "Events from any engine"); this script drives the endpoint engine directly, to show every event's source."""

from __future__ import annotations

import argparse
import shlex
import socket
import sys
import time
from collections import Counter

from specdec_eval.peers.client.config import EndpointConfig
from specdec_eval.peers.client.engine import EndpointEngine
from specdec_eval.workers.config import SamplingParams

from specdec_eval.event_types import FAILING_EVENTS

CASES = {
    "seed": (
        ("unguarded", "--inject warmup_oom --spec-guard none --warmup on"),
        ("guarded", "--inject warmup_oom --spec-guard template --warmup on"),
    ),
    "kv-leak": (("leaking", "--kv-cache v2 --inject rewind_leaks_blocks"), ("clean", "--kv-cache v2")),
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def side(name: str, flags: str, args: argparse.Namespace) -> dict:
    port = free_port()
    command = (
        f"{shlex.quote(sys.executable)} -m specdec_eval.cli.main serve --model {args.model} "
        f"--device-memory {args.device_memory} --spec eagle3 {flags} --port {port}"
    )
    started = time.perf_counter()
    engine = EndpointEngine(
        EndpointConfig(
            url=f"http://127.0.0.1:{port}",
            serve_cmd=command,
            model=args.model,
            spec="eagle3",
            max_draft_len=3,
            concurrency=4,
            startup_timeout_s=600,
            stall_floor_s=30,
        )
    )
    ready = time.perf_counter() - started
    prompts = [f"Question: what is {7 * i + 3} + {i + 12}? Answer:" for i in range(args.prompts)]
    try:
        start = time.perf_counter()
        outputs = engine.generate(prompts, SamplingParams(max_new_tokens=args.max_tokens, ignore_eos=True))
        took = time.perf_counter() - start
        events = engine.collect_events()
        server = dict(engine.identity.server)
    finally:
        engine.close()
    return {
        "name": name,
        "flags": flags,
        "ready_s": ready,
        "run_s": took,
        "events": events,
        "server": server,
        "failed": sum(o.finish_reason == "error" for o in outputs),
        "n": len(outputs),
    }


def show(result: dict) -> None:
    events = result["events"]
    failing = [e for e in events if e["type"] in FAILING_EVENTS]
    verdict = "FAIL" if failing else "PASS"
    print(
        f"\n== {result['name']} ({result['flags']}): {verdict} ({len(failing)} failing events; {result['failed']}/"
        f"{result['n']} requests failed; server up in {result['ready_s']:.1f} s, run {result['run_s']:.1f} s)"
    )
    server = result["server"]
    print(
        f"   server: {server.get('command')}\n   log: {server.get('log')} (table {server.get('log_format')}: "
        f"{server.get('log_format_from')}); KV usage: {server.get('kv_usage_source')}"
    )
    counts = Counter((e["type"], e.get("source", "client")) for e in events)
    print(f"   {'event':22} {'from':11} {'count':>5}  {'fails':5}  first (log line: message)")
    for (type_, source), n in sorted(counts.items()):
        first = next(e for e in events if e["type"] == type_ and e.get("source", "client") == source)
        said = first.get("message") or first.get("reason") or first.get("error") or ""
        where = f"{first['line']}: {said}" if "line" in first else str(said)
        print(f"   {type_:22} {source:11} {n:5d}  {'yes' if type_ in FAILING_EVENTS else '':5}  {where[:100]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", choices=tuple(CASES), default="seed")
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--device-memory", default="256MiB")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=16)
    args = parser.parse_args()
    for name, flags in CASES[args.case]:
        show(side(name, flags, args))


if __name__ == "__main__":
    main()
