"""vLLM's CPU build judged end to end: `run --endpoint SPEC --baseline-endpoint PLAIN` with the exported SmolLM2
(float32) behind both, speculating with n-gram and with Eagle3 (the shipped head). For n-gram the run starts the
speculating server itself (`--serve-cmd`: its log becomes the run's events); Eagle3's is the session's, which the
bug-class matrix reuses (`--server-log` follows its log), as is the plain baseline (tests/vllm_server.py). Greedy
decoding: the lossless verdict, acceptance read from vLLM's own per-request metrics, KV usage back to idle after the
run, and no failing line in vLLM's log. Two questions, 16-32 tokens each: eagle3 took 115 s (the plain server's
start included), ngram 125 s (run alone)."""

from __future__ import annotations

import json

import pytest
from specdec_eval.peers.profiles.vllm import SOURCE as VLLM_SOURCE

from ...cli_helpers import run_cli
from ...vllm_server import DRAFT_LEN, serve_command

RUN_ARGS = (
    "--model",
    "smollm2",
    "--tasks",
    "gsm8k_smoke",
    "--limit",
    "2",
    "--no-reference",
    "--concurrency",
    "1",
    "--dtype",
    "float32",
    "--startup-timeout",
    "420",
    "--fresh",
    "--json",
)
# n-gram drafts only where the text repeats itself: zero-shot answers of 16 tokens gave it nothing to propose (0 drafts
# measured), solved examples in the prompt do.
METHOD_ARGS = {
    "eagle3": ("--num-fewshot", "0", "--max-output-len", "16"),
    "ngram": ("--num-fewshot", "3", "--max-output-len", "32"),
}


def judge(capsys, tmp_path, servers, method: str) -> tuple[int, dict, dict, str]:
    if method == "eagle3":  # the session's (the matrix's too), its log followed
        spec = servers.get("eagle3")
        server_args = ("--endpoint", spec.url, "--server-log", str(spec.log_path))
    else:  # started by the run, which owns its log and its lifetime
        servers.make_room(1)
        spec = serve_command(method)
        server_args = ("--endpoint", spec.url, "--serve-cmd", str(spec))
    plain = servers.get("plain")
    code, stdout, err = run_cli(
        capsys,
        "run",
        *server_args,
        "--baseline-endpoint",
        plain.url,
        "--spec",
        method,
        "--draft-len",
        str(DRAFT_LEN),
        "--out",
        str(tmp_path / "runs"),
        *RUN_ARGS,
        *METHOD_ARGS[method],
    )
    assert code in (0, 1), err
    summary = json.loads(stdout)
    manifest = json.loads((tmp_path / "runs" / summary["run_id"] / "manifest.json").read_text())
    return code, summary, manifest, err


@pytest.mark.slow
@pytest.mark.parametrize("method", ["ngram", "eagle3"])  # ngram first: its own server evicts none that eagle3 needs
def test_vllm_speculation_is_judged_lossless_with_its_own_acceptance(method, vllm_servers, tmp_path, capsys):
    code, summary, manifest, err = judge(capsys, tmp_path, vllm_servers, method)
    task = summary["tasks"]["gsm8k_smoke"]
    assert task["num_failed_requests"] == 0, err
    lossless = task["lossless"]
    assert lossless["num_pairs"] == 2 and lossless["identical"] == 2, lossless  # float32 greedy: token for token
    reported = summary["reported_acceptance"]
    if method == "eagle3":  # each response's own counts, not a server-wide delta
        assert reported["source"] == VLLM_SOURCE, reported
    # vLLM 0.32 left the per-request counts out of every answer that ended at a stop string (both n-gram answers here,
    # one of eagle3's): the run then falls back to the server-wide delta and its "basis" says so.
    assert reported["num_cycles"] > 0 and 1.0 <= reported["acceptance_length"] <= DRAFT_LEN + 1
    server = manifest["engine"]["server"]
    assert server["log_format"] == "vllm" and server["kv_usage_source"].startswith("vllm:kv_cache_usage_perc")
    assert summary["failing_events"] == 0 and "kv_leak" not in summary["events"]  # KV usage back to idle
    assert code == 0 and summary["verdict"] == "PASS", err
    started = f", its server ready in {server['startup_s']} s" if server.get("startup_s") else ""  # the run's own
    print(f"\nvLLM {method}: AL {reported['acceptance_length']}{started}")
