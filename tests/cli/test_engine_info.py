"""`engine info`: the report comes from workers/memory/capacity.py (no weights loaded), the command prints it."""

from __future__ import annotations

import json
from dataclasses import replace

from specdec_eval.workers.engine_options import from_options
from specdec_eval.workers.memory.capacity import capacity_report

from ..cli_helpers import run_cli

TINY = dict(model="tiny", device_memory="256MiB", max_batch_size=8)


def test_report_has_the_numbers_engine_info_printed_before_the_move():
    """What `engine info --model tiny --device-memory 256MiB --draft-layers 1 --draft-len 3 --max-batch-size 8`
    printed before the arithmetic moved out of the command (captured from that commit's output)."""
    report = capacity_report(from_options(**TINY), draft_layers=1, draft_len=3)
    assert report["parameters"] == 262_976 and report["valid_tp_sizes"] == [1, 2]
    assert report["memory"] == {
        "total_gib": 0.25,
        "weights_gib": 0.001,
        "activation_gib": 0.012,
        "free_gib": 0.237,
        "measured": False,
    }
    v1, v2 = report["kv_cache"]["v1"], report["kv_cache"]["v2"]
    for kv in (v1, v2):
        assert (kv["num_blocks"], kv["max_tokens"], kv["bytes_per_token"], kv["num_layers"]) == (7997, 127_952, 1792, 7)
    assert v1["full_length_requests_at_once"] == 62 and v1["request_tokens"] == 2048
    assert v2["headroom_blocks_at_max_batch"] == 8
    assert report["decode_copy"] == {"enabled": True, "max_gib": 0.214}


def test_v1_and_v2_policies_differ_as_their_arithmetic_says():
    """A token cap bounds v1's pool; v2 turns it into a byte quota over max_util_for_resume (more blocks). v1 fits
    num_blocks // blocks-per-full-request requests; v2 reserves ceil((1 + K) / block) blocks per live request."""
    base = from_options(**TINY, max_seq_len=1000)
    base = replace(base, kv_cache=replace(base.kv_cache, max_tokens=4000))
    report = capacity_report(base, draft_layers=1, draft_len=16)
    v1, v2 = report["kv_cache"]["v1"], report["kv_cache"]["v2"]
    assert v1["max_tokens"] == 4000 and v2["num_blocks"] > v1["num_blocks"]
    assert v1["request_tokens"] == 1000 and v1["full_length_requests_at_once"] == v1["num_blocks"] // 63
    assert v2["headroom_blocks_at_max_batch"] == 8 * 2


def test_engine_info_prints_the_library_report(capsys):
    argv = [
        "engine",
        "info",
        "--model",
        "tiny",
        "--device-memory",
        "256MiB",
        "--draft-layers",
        "1",
        "-k",
        "3",
        "--max-batch-size",
        "8",
    ]
    code, out, err = run_cli(capsys, *argv, "--json")
    assert code == 0, err
    assert json.loads(out) == capacity_report(from_options(**TINY), draft_layers=1, draft_len=3)
    code, out, err = run_cli(capsys, *argv)
    assert code == 0, err
    assert "kv v1      7,997 blocks x 16 tokens = 127,952 tokens, 0.214 GiB (1,792 B/token, 7 layers)" in out
    assert "whole sequence reserved at admission: 62 requests of 2048 tokens at once" in out
    assert "preempt when out: 8 blocks of headroom at batch 8" in out


def test_a_tp_size_the_heads_do_not_divide_is_a_user_error(capsys):
    code, _, err = run_cli(capsys, "engine", "info", "--model", "tiny", "--tp", "3")
    assert code == 2 and err.count("\n") == 1
