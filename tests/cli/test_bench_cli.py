"""`specdec-eval bench` end to end on the tiny model: rounds, spreads, identity, hardware fractions, both outputs."""

from __future__ import annotations

import contextlib
import io
import json

import pytest
from specdec_eval.cli.bench_print import print_bench
from specdec_eval.cli.main import main
from specdec_eval.evals.bench import speed as bench_module
from specdec_eval.evals.bench.hardware import HardwareLimits

from ..cli_helpers import run_cli

TINY = [
    "bench",
    "--model",
    "tiny",
    "--device-memory",
    "256MiB",
    "--num-prompts",
    "4",
    "--batch1-prompts",
    "2",
    "-n",
    "8",
    "--spec",
    "eagle3",
    "-k",
    "2",
    "--rounds",
    "2",
]
# The probes themselves are tested in tests/evals/bench/test_hardware.py; here their figures only feed the fractions.
LIMITS = HardwareLimits("cpu", 2, 100.0, 2048, 10.0, 8.0, 256, 5)


@pytest.fixture(scope="module")
def bench_run() -> tuple[dict, str]:
    """One `bench --json` at batch 1 and 4 with every side, read by the tests below (the JSON and the table print
    from the same result; a second bench run only for the table cost ~30 s of CI)."""
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        mp.setattr(bench_module, "measure_limits_apart", lambda *a, **k: LIMITS)
        with contextlib.suppress(SystemExit):
            main([*TINY, "--batch-sizes", "1,4", "--json"])
    assert out.getvalue(), err.getvalue()[-3000:]
    return json.loads(out.getvalue()), err.getvalue()


@pytest.mark.slow
def test_bench_runs_every_side_in_every_round(bench_run):
    result, err = bench_run
    assert result["rounds"] == 2 and result["hardware"]["gemm_gflops"] > 0 and result["hardware"]["bandwidth_gbs"] > 0
    assert "2*P_layers*T" in result["formulas"]["prefill"] and "steps*W" in result["formulas"]["decode"]
    # interleaved: round 1 (ours, spec, hf), round 2 (ours, spec, hf), at each batch size in turn
    order = [line.split(", batch")[0] for line in err.splitlines() if line.startswith("bench: round")]
    assert order == [f"bench: round {r}/2, {s}" for _ in (1, 4) for r in (1, 2) for s in ("ours", "spec", "hf")]
    for row in result["rows"]:
        n = row["prompts"]
        assert row["ours_identical_to_hf"] == f"{n}/{n}" and row["spec_identical_to_plain"] == f"{n}/{n}"
        assert row["rounds_identical"] and len(set(row["outputs_sha256"].values())) == 1
        for key in ("ours_vs_hf", "ours_vs_hf_decode", "spec_vs_plain", "spec_vs_plain_decode"):
            s = row["spreads"][key]
            assert len(s["per_round"]) == 2 and s["low"] <= row[key] <= s["high"]
        for side in ("ours", "hf"):
            assert row[f"{side}_prefill_gflops"] > 0 and row[f"{side}_decode_of_bandwidth"] > 0
    assert result["unstable"] == [line for row in result["rows"] for line in row["unstable"]]
    assert "bench: expected duration ~" in err and result["estimate"]["measurements"] == 2 * 2 * 3


@pytest.mark.slow
def test_bench_table(bench_run, capsys):
    result, _ = bench_run
    print_bench(result)
    out = capsys.readouterr().out
    assert "2 rounds interleaved" in out and "fp32 GEMM" in out and "formulas  prefill FLOP" in out
    assert "spec / plain" in out and "identical outputs     ours = HF 4/4, spec = plain 4/4, every round alike" in out
    assert "ours: prefill" in out and "of the GEMM peak" in out and "of the memory bandwidth" in out
    assert "ours / HF" in out and "hf: prefill" in out and "duration  " in out and "expected" in out
    without_hf = {**result, "rows": [{k: v for k, v in row.items() if "hf" not in k} for row in result["rows"]]}
    print_bench(without_hf)  # a --skip-hf result: no HF line, no HF ratio
    out = capsys.readouterr().out
    assert "ours / HF" not in out and "hf: prefill" not in out and "HF transformers" not in out


def test_skip_hf_builds_no_hf_side(tiny):
    from specdec_eval.evals.bench.sides import build_sides
    from specdec_eval.workers.config import EngineConfig

    sides, _ = build_sides(EngineConfig(model="tiny", device="cpu", device_memory=256 * 2**20), None, True, *tiny)
    assert list(sides) == ["ours"]


def test_bad_rounds_and_batch_sizes_are_user_errors(capsys):
    for argv, message in (
        (["--rounds", "1"], "--rounds must be at least 2"),
        (["--batch-sizes", "1,x"], "--batch-sizes"),
    ):
        code, _, err = run_cli(capsys, "bench", "--model", "tiny", *argv)
        assert code == 2 and message in err and err.count("\n") == 1, err


def test_verdict_needs_spec_decoding(capsys):
    code, _, err = run_cli(capsys, "bench", "--verdict", "--model", "tiny", "--task", "gsm8k_smoke")
    assert code == 2 and "--spec eagle3" in err
