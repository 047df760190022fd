"""Continuous batching across HTTP requests, measured: N concurrent requests vs the same N one after another vs
offline `engine.generate` on the same prompts, in one run (ratios, not absolute rates, compare across machines).

    python -m specdec_eval.serve.bench --model tiny --device-memory 256MiB
    python -m specdec_eval.serve.bench --model smollm2 --spec eagle3 --requests 32 --max-tokens 64

Every request is greedy with `ignore_eos`, so each one generates exactly --max-tokens tokens and all three ways do
the same work; the HTTP answers are also checked token for token against the offline outputs."""

from __future__ import annotations

import argparse
import asyncio
import json
import threading
import time
from typing import Any

import httpx

from ..workers.config import SamplingParams
from ..workers.engine_options import from_options
from ..workers.interface import ServingEngine
from .app import ServerSettings
from .server import BackgroundServer

TIMEOUT_S = 600.0


def bench_prompts(n: int) -> list[str]:
    """Distinct prompts of a few different lengths (self-written)."""
    stems = [
        "The capital of France is",
        "Write a short poem about the sea.",
        "def fibonacci(n):",
        "Explain why the sky is blue in one paragraph.",
        "List three uses for a paperclip:",
        "Once upon a time, in a village at the edge of a forest,",
        "Q: What is 15 times 4?\nA:",
        "SELECT name, COUNT(*) FROM orders",
    ]
    return [f"{stems[i % len(stems)]} ({i})" for i in range(n)]


def completion_body(prompt: str, max_tokens: int, model: str) -> dict[str, Any]:
    return {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True}


def time_sequential(url: str, bodies: list[dict[str, Any]]) -> tuple[float, list[dict[str, Any]]]:
    start = time.perf_counter()
    with httpx.Client(base_url=url, timeout=TIMEOUT_S) as client:
        answers = [_checked(client.post("/v1/completions", json=body)) for body in bodies]
    return time.perf_counter() - start, answers


def time_concurrent(url: str, bodies: list[dict[str, Any]]) -> tuple[float, list[dict[str, Any]]]:
    async def run() -> list[dict[str, Any]]:
        limits = httpx.Limits(max_connections=len(bodies), max_keepalive_connections=len(bodies))
        async with httpx.AsyncClient(base_url=url, timeout=TIMEOUT_S, limits=limits) as client:
            responses = await asyncio.gather(*(client.post("/v1/completions", json=b) for b in bodies))
        return [_checked(r) for r in responses]

    start = time.perf_counter()
    answers = asyncio.run(run())
    return time.perf_counter() - start, answers


def _timed_generate(engine: ServingEngine, prompts: list[str], sampling: SamplingParams):
    engine.generate(prompts[:1], sampling)  # first-call costs out of the way
    start = time.perf_counter()
    outputs = engine.generate(prompts, sampling)
    return time.perf_counter() - start, outputs


def _in_thread(work):
    """Run `work` on a thread of its own, as the server runs its engine loop: on a busy CPU, torch's intra-op
    threads launched from the main thread were several times slower than from another thread (2-core machine at
    load 8), which would make the comparison about threads, not about batching."""
    box: list = []
    thread = threading.Thread(target=lambda: box.append(work()))
    thread.start()
    thread.join()
    return box[0]


def _checked(response: httpx.Response) -> dict[str, Any]:
    if response.status_code != 200:
        raise RuntimeError(f"HTTP {response.status_code}: {response.text[:300]}")
    return response.json()


def run_bench(engine: ServingEngine, settings: ServerSettings, num_requests: int, max_tokens: int) -> dict[str, Any]:
    prompts = bench_prompts(num_requests)
    sampling = SamplingParams(max_new_tokens=max_tokens, ignore_eos=True)
    offline_s, offline = _in_thread(lambda: _timed_generate(engine, prompts, sampling))
    bodies = [completion_body(p, max_tokens, settings.model_name) for p in prompts]
    with BackgroundServer(engine, settings) as server:
        time_sequential(server.url, bodies[:1])  # the server's first request (connection, code paths) too
        concurrent_s, concurrent = time_concurrent(server.url, bodies)
        sequential_s, sequential = time_sequential(server.url, bodies)
    want = [o.token_ids for o in offline]
    identical = sum(
        a["choices"][0]["token_ids"] == w == b["choices"][0]["token_ids"]
        for a, b, w in zip(concurrent, sequential, want, strict=True)
    )
    one_request_s = sequential_s / num_requests
    return {
        "num_requests": num_requests,
        "max_tokens": max_tokens,
        "offline_s": round(offline_s, 3),
        "concurrent_s": round(concurrent_s, 3),
        "sequential_s": round(sequential_s, 3),
        "one_request_s": round(one_request_s, 3),
        "concurrent_over_one_request": round(concurrent_s / one_request_s, 2),
        "sequential_over_concurrent": round(sequential_s / concurrent_s, 2),
        "concurrent_over_offline": round(concurrent_s / offline_s, 2),
        "identical_to_offline": identical,
    }


def _print(result: dict[str, Any], what: str) -> None:
    n = result["num_requests"]
    print(f"{n} requests x {result['max_tokens']} tokens ({what}):")
    print(f"  offline engine.generate   {result['offline_s']:8.2f} s")
    print(
        f"  HTTP, {n} concurrent      {result['concurrent_s']:8.2f} s   {result['concurrent_over_offline']}x "
        f"offline; {result['concurrent_over_one_request']}x one request's time"
    )
    print(
        f"  HTTP, {n} sequential      {result['sequential_s']:8.2f} s   one request {result['one_request_s']} s; "
        f"concurrent is {result['sequential_over_concurrent']}x faster"
    )
    print(f"  HTTP answers identical to offline: {result['identical_to_offline']}/{n}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m specdec_eval.serve.bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--device-memory", default=None, help="e.g. 256MiB (CPU budget)")
    parser.add_argument("--kv-cache", default="v1")
    parser.add_argument("--spec", default="none", help="none | eagle3")
    parser.add_argument("--max-batch-size", type=int, default=64)
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    from ..workers.engine.engine import Engine

    config = from_options(
        model=args.model,
        device=args.device,
        device_memory=args.device_memory,
        kv_cache=args.kv_cache,
        spec=args.spec,
        max_batch_size=args.max_batch_size,
    )
    engine = Engine.build(config)
    settings = ServerSettings(args.model, engine.max_seq_len, engine.model_config.vocab_size)
    result = run_bench(engine, settings, args.requests, args.max_tokens)
    what = f"{args.model}, {'plain decoding' if args.spec == 'none' else args.spec}, {engine.device.type}"
    if args.json:
        print(json.dumps({**result, "setup": what}))
    else:
        _print(result, what)


if __name__ == "__main__":
    import sys

    from ..errors import UserError

    try:
        main()
    except UserError as e:
        print(f"specdec-eval: error: {e}", file=sys.stderr)
        sys.exit(2)
