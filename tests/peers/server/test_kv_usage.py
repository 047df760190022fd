"""A server's KV usage from its metrics (peers/server/kv_usage.py): each engine's gauge, and the check that
it returns to its idle value after a run drained (else the fields of a `kv_leak` event)."""

from __future__ import annotations

import json

from specdec_eval.peers.server.kv_usage import KVUsage, check_drained, parse_kv_usage

VLLM = """# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
vllm:kv_cache_usage_perc{engine="0",model_name="other"} 0.75
"""
SGLANG = 'sglang:token_usage{model_name="m",tp_rank="0"} 0.5\n'
TRTLLM = "trtllm_kv_cache_utilization 0.125\n"
TRTLLM_JSON = json.dumps(
    [
        {"iter": 1, "kvCacheStats": {"maxNumBlocks": 100, "usedNumBlocks": 40}},
        {"iter": 2, "kvCacheStats": {"maxNumBlocks": 100, "usedNumBlocks": 10}},
    ]
)


def test_each_engines_gauge():
    assert parse_kv_usage(VLLM, model="m") == ("vllm:kv_cache_usage_perc", 0.25)  # the served model's series
    assert parse_kv_usage(VLLM) == ("vllm:kv_cache_usage_perc", 0.75)  # without a model: the fullest engine
    assert parse_kv_usage(SGLANG, model="m") == ("sglang:token_usage", 0.5)
    assert parse_kv_usage(TRTLLM) == ("trtllm_kv_cache_utilization", 0.125)
    assert parse_kv_usage(TRTLLM_JSON) == ("kvCacheStats (TensorRT-LLM iteration stats)", 0.1)  # the last iteration
    assert parse_kv_usage(TRTLLM_JSON, read_json=False) is None  # the acceptance scraper drains those: not read
    assert parse_kv_usage("[]") is None and parse_kv_usage("<html>no</html>") is None
    assert parse_kv_usage("vllm:num_requests_running 3\n") is None


def test_back_to_idle_or_a_leak():
    idle = KVUsage("g at /metrics", 0.0)
    clock = iter(range(100))
    readings = iter([0.2, 0.1, 0.0])  # freed over a few steps: no leak

    def read() -> KVUsage:
        return KVUsage("g at /metrics", next(readings))

    assert check_drained(read, idle, timeout_s=10, clock=lambda: next(clock), sleep=lambda s: None) is None
    clock = iter(range(100))
    leak = check_drained(
        lambda: KVUsage("g at /metrics", 0.05), idle, timeout_s=3, clock=lambda: next(clock), sleep=lambda s: None
    )
    assert leak["idle_used"] == 0.0 and leak["used"] == 0.05 and leak["gauge"] == "g at /metrics"
    assert leak["message"].startswith("KV usage stayed at 5.00% after the run drained (idle: 0.00%")
    assert check_drained(lambda: None, idle, timeout_s=0, clock=lambda: 0.0) is None  # no gauge: nothing to judge
