"""How long a run takes to fail against a server that stops answering (a fake OpenAI-compatible server that answers
its first requests, then hangs while /health answers 200: tests/fake_server_helpers.py), with the stall watch
(`peers.server.stall_watch`) and without it (the same run with the watch's floor set beyond reach, so each
unanswered request waits its timeout on every attempt). The peer without the watch is measured at a short request
timeout (it would take hours at the default 3600 s); both are also compared with the formula
timeouts x attempts x rounds of documents (`time_without_watch`), which the measured peer checks.

    .venv/bin/python scripts/measure_stall.py                       # 16 documents, 4 answered, concurrency 4
    .venv/bin/python scripts/measure_stall.py --floor 10 --peer-timeout 3"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository's tests/ (the fake server)

from specdec_eval.peers.client.config import (  # noqa: E402
    DEFAULT_RETRIES,
    DEFAULT_TIMEOUT_S,
    EndpointConfig,
)
from specdec_eval.peers.client.engine import EndpointEngine  # noqa: E402
from specdec_eval.peers.server.stall_watch import DEFAULT_STALL_FLOOR_S, time_without_watch  # noqa: E402
from specdec_eval.workers.config import SamplingParams  # noqa: E402
from specdec_eval.workers.loading.checkpoint import load_checkpoint  # noqa: E402

from tests.fake_server_helpers import HangingServer  # noqa: E402


def one_run(tokenizer, args, timeout_s: float, floor_s: float) -> tuple[float, int, str]:
    with HangingServer(answer_first=args.answered) as server:
        engine = EndpointEngine(
            EndpointConfig(
                url=server.url,
                concurrency=args.concurrency,
                max_retries=args.retries,
                timeout_s=timeout_s,
                stall_floor_s=floor_s,
                kv_drain_timeout_s=0,
            ),
            tokenizer=tokenizer,
        )
        start = time.perf_counter()
        outputs = engine.generate(
            [f"Question {i}: what is {i} + 2?" for i in range(args.documents)], SamplingParams(max_new_tokens=4)
        )
        took = time.perf_counter() - start
        stalled = [e for e in engine.collect_events() if e["type"] == "server_stalled"]
        engine.close()
    failed = sum(o.finish_reason == "error" for o in outputs)
    return took, failed, stalled[0]["reason"] if stalled else "(no stall: each request ran out of attempts)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--documents", type=int, default=16)
    parser.add_argument("--answered", type=int, default=4, help="requests the server answers before it hangs")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--retries", type=int, default=DEFAULT_RETRIES)
    parser.add_argument("--floor", type=float, default=DEFAULT_STALL_FLOOR_S, help="the watch's floor (s)")
    parser.add_argument("--peer-timeout", type=float, default=5.0, help="request timeout of the run without the watch")
    args = parser.parse_args()
    tokenizer = load_checkpoint("tiny").load_tokenizer()
    unanswered = args.documents - args.answered
    print(
        f"{args.documents} documents, the server answers {args.answered} then hangs (/health 200); concurrency "
        f"{args.concurrency}, {args.retries} retries",
        flush=True,
    )

    took, failed, reason = one_run(tokenizer, args, DEFAULT_TIMEOUT_S, args.floor)
    print(
        f"with the watch (floor {args.floor:g} s, request timeout {DEFAULT_TIMEOUT_S:g} s): FAIL after {took:.1f} s, "
        f"{failed} documents failed\n  reason: {reason}",
        flush=True,
    )

    peer, peer_failed, _ = one_run(tokenizer, args, args.peer_timeout, 1e9)
    predicted = time_without_watch(args.peer_timeout, args.retries, unanswered, args.concurrency)
    print(
        f"without the watch (request timeout {args.peer_timeout:g} s): {peer:.1f} s, {peer_failed} documents failed "
        f"(formula: {predicted:.1f} s)",
        flush=True,
    )
    default = time_without_watch(DEFAULT_TIMEOUT_S, args.retries, unanswered, args.concurrency)
    print(
        f"without the watch at the default request timeout {DEFAULT_TIMEOUT_S:g} s (formula): {default:.0f} s "
        f"= {default / 3600:.1f} h, {default / took:.0f}x the watch's {took:.1f} s"
    )


if __name__ == "__main__":
    main()
