"""The command line as a user meets it: JSON lines out, progress on stderr, one-line errors with exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ..cli_helpers import run_cli

ROOT = Path(__file__).resolve().parents[2]


def test_generate_plain_and_jsonl(capsys, monkeypatch):
    prompts = 'hello there\n\n{"prompt": "one two three"}\n{"messages": [{"role": "user", "content": "hi"}]}\n'
    code, out, err = run_cli(
        capsys,
        "generate",
        "-",
        "--model",
        "tiny",
        "-n",
        "6",
        "--ignore-eos",
        "--device-memory",
        "512MiB",
        stdin=prompts,
        monkeypatch=monkeypatch,
    )
    assert code == 0, err
    records = [json.loads(line) for line in out.splitlines()]
    assert [r["index"] for r in records] == [0, 1, 2]
    assert all(len(r["token_ids"]) == 6 and r["finish_reason"] == "length" for r in records)
    assert records[2]["prompt"] == [{"role": "user", "content": "hi"}]
    assert {"num_prompt_tokens", "num_output_tokens", "latency_s"} <= set(records[0]["stats"])
    assert "tok/s" in err and "kv v1" in err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["generate", "-", "--model", "{missing}/model"], "model path not found"),
        (["generate", "-", "--model", "tiny", "--kv-cache", "v3"], "'--kv-cache': 'v3' is not one of 'v1', 'v2'"),
        (["generate", "-", "--model", "tiny", "--tp", "3"], "TP size 3 does not divide"),
        (["engine", "info", "--model", "tiny", "--tp", "3"], "TP size 3 does not divide"),
        (["generate", "{missing}/prompts.txt", "--model", "tiny"], "prompts file not found"),
        (["generate", "-", "--model", "tiny", "--device-memory", "lots"], "cannot read memory size"),
        (["generate", "-", "--model", "tiny", "--device-memory", "1MiB"], "device memory budget"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, monkeypatch, tmp_path, argv, message):
    # a missing path lies under tmp_path: a fixed outside path such as /no/such may exist on some machine
    argv = [a.replace("{missing}", str(tmp_path / "missing")) for a in argv]
    code, out, err = run_cli(capsys, *argv, stdin="hello\n", monkeypatch=monkeypatch)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("specdec-eval: error: ") and message in err, err
    assert out == ""


def test_not_llama_config_is_exit_2(capsys, monkeypatch, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]}))
    (tmp_path / "model.safetensors").write_bytes(b"")
    code, _, err = run_cli(capsys, "generate", "-", "--model", str(tmp_path), stdin="x\n", monkeypatch=monkeypatch)
    assert code == 2 and "not Llama-family" in err and err.count("\n") == 1


def test_bad_jsonl_line_names_the_line(capsys, monkeypatch):
    code, _, err = run_cli(capsys, "generate", "-", "--model", "tiny", stdin="ok\n{bad json\n", monkeypatch=monkeypatch)
    assert code == 2 and "stdin:2: not valid JSON" in err


def test_generate_with_eagle3_prints_acceptance(capsys, monkeypatch):
    argv = ["generate", "-", "--model", "tiny", "-n", "9", "--ignore-eos", "--spec", "eagle3", "-k", "3"]
    code, out, err = run_cli(capsys, *argv, stdin="hello\nworld\n", monkeypatch=monkeypatch)
    assert code == 0, err
    records = [json.loads(line) for line in out.splitlines()]
    assert all(len(r["token_ids"]) == 9 for r in records)
    assert records[0]["stats"]["acceptance"]["max_draft_len"] == 3
    assert "acceptance length" in err and "incl. bonus token" in err


def test_generate_writes_events_and_exits_1_on_failed_requests(capsys, monkeypatch, tmp_path):
    events = tmp_path / "events.jsonl"
    argv = [
        "generate",
        "-",
        "--model",
        "tiny",
        "-n",
        "6",
        "--spec",
        "eagle3",
        "--spec-guard",
        "none",
        "--inject",
        "draft_step:1@2",
        "--events",
        str(events),
    ]
    code, out, err = run_cli(capsys, *argv, stdin="hello\nworld\n", monkeypatch=monkeypatch)
    assert code == 1
    records = [json.loads(line) for line in out.splitlines()]
    assert all(r["finish_reason"] == "error" and "never restored" in r["error"] for r in records)
    lines = [json.loads(line) for line in events.read_text().splitlines()]
    types = {e["type"] for e in lines}
    assert {"fault_injected", "forward_error", "spec_state_leak", "request_failed"} <= types
    assert all({"ts", "rank", "type"} <= set(e) for e in lines)
    assert "2 of 2 requests FAILED" in err


def test_bad_spec_options_are_exit_2(capsys, monkeypatch, tmp_path):
    for argv, message in (
        (["--spec", "medusa"], "'--spec': 'medusa' is not one of 'none', 'eagle3'"),
        (["--spec", "eagle3", "-k", "0"], "'--draft-len' / '-k': Input should be greater than or equal to 1"),
        (["--spec", "eagle3", "--spec-guard", "maybe"], "'--spec-guard': 'maybe' is not one of"),
        (["--spec", "eagle3", "--draft-model", str(tmp_path / "no-head")], "draft model folder not found"),
        (["--spec", "eagle3", "--capture-layers", "1,x,3"], "--capture-layers"),
    ):
        code, _, err = run_cli(capsys, "generate", "-", "--model", "tiny", *argv, stdin="hi\n", monkeypatch=monkeypatch)
        assert code == 2 and message in err and err.count("\n") == 1, (argv, err)


def test_engine_info_json(capsys):
    code, out, err = run_cli(capsys, "engine", "info", "--model", "tiny", "--device-memory", "1GiB", "--json")
    assert code == 0, err
    info = json.loads(out)
    assert info["valid_tp_sizes"] == [1, 2]
    v1, v2 = info["kv_cache"]["v1"], info["kv_cache"]["v2"]
    assert v1["bytes_per_token"] == 2 * 6 * 2 * 16 * 4
    assert v1["num_blocks"] > 0 and v2["num_blocks"] > 0


def test_engine_info_matches_a_real_engine(tiny, capsys):
    """The capacity `engine info` reports (no weights loaded) is what the engine really allocates."""
    from ..conftest import make_engine

    engine = make_engine(tiny, "v2", device_memory=2**28)
    code, out, _ = run_cli(capsys, "engine", "info", "--model", "tiny", "--device-memory", str(2**28), "--json")
    assert code == 0
    assert json.loads(out)["kv_cache"]["v2"]["num_blocks"] == engine.kv_layout.num_blocks


def test_bench_measures_each_batch_size_for_every_side(capsys):
    argv = [
        "bench",
        "--model",
        "tiny",
        "--num-prompts",
        "4",
        "--batch1-prompts",
        "2",
        "--batch-sizes",
        "1,4",
        "-n",
        "8",
        "--json",
        "--spec",
        "eagle3",
        "-k",
        "2",
    ]
    code, out, err = run_cli(capsys, *argv)
    assert code == 0, err
    result = json.loads(out)
    one, four = result["rows"]
    assert (one["batch"], one["prompts"], four["batch"], four["prompts"]) == (1, 2, 4, 4)
    for row in (one, four):
        n = row["prompts"]
        assert row["ours_identical_to_hf"] == f"{n}/{n}" and row["spec_identical_to_plain"] == f"{n}/{n}"
        assert all(row[f"{side}_{rate}"] > 0 for side in ("ours", "hf", "spec") for rate in ("tok_s", "decode_tok_s"))
        assert row["ours_vs_hf_decode"] > 0 and row["spec_vs_plain_decode"] > 0
        assert row["ours_vs_hf"] > 0 and row["spec_vs_plain"] > 0 and row["ours_peak_mib"] > 0
        assert 1.0 <= row["acceptance_length"] <= 3.0


def test_bench_rejects_bad_batch_sizes(capsys):
    code, _, err = run_cli(capsys, "bench", "--model", "tiny", "--batch-sizes", "1,x")
    assert code == 2 and "--batch-sizes" in err


def test_console_script_and_namespace(tmp_path):
    """The installed console script runs, and installing created no bare top-level `cli`/`workers` packages."""
    env = {**os.environ, "PYTHONPATH": ""}
    exe = Path(sys.executable).with_name("specdec-eval")
    proc = subprocess.run([str(exe), "--help"], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert proc.returncode == 0 and "generate" in proc.stdout
    probe = (
        "import importlib.util as u; print([n for n in ('cli','workers','results','evals','launch') if u.find_spec(n)])"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert proc.stdout.strip() == "[]", proc.stdout + proc.stderr
