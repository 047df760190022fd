"""Resume: a run killed half-way and run again ends with the same samples as an uninterrupted run, and the
generations finished before the kill are reused, not generated again."""

from __future__ import annotations

import dataclasses
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from specdec_eval.results.store import list_runs

CLI = [sys.executable, "-m", "specdec_eval.cli.main", "run"]
ARGS = [
    "--model",
    "tiny",
    "--tasks",
    "gsm8k_smoke",
    "--max-output-len",
    "64",
    "--no-reference",
    "--device-memory",
    "256MiB",
    "--max-batch-size",
    "1",
    "--json",
]


def _finished_samples(root: Path) -> list[tuple]:
    (run,) = [r for r in list_runs(root) if r.is_finished]
    return sorted((s.doc_id, s.output_hash, s.prompt_hash) for s in run.samples())


@pytest.mark.slow
def test_killed_run_resumes_without_regenerating(tmp_path):
    full = subprocess.run(CLI + ARGS + ["--out", str(tmp_path / "full")], capture_output=True, text=True, timeout=600)
    assert full.returncode == 0, full.stderr[-2000:]

    root = tmp_path / "resumed"
    proc = subprocess.Popen(CLI + ARGS + ["--out", str(root)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 300
    partial: list[Path] = []
    while time.time() < deadline:
        partial = list(root.glob("*/partial/generations.*.jsonl"))
        if partial and len(partial[0].read_text().splitlines()) >= 3:
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done_before = sum(len(p.read_text().splitlines()) for p in partial)
    assert 3 <= done_before < 8, "kill the run half-way"
    assert not any(r.is_finished for r in list_runs(root))

    again = subprocess.run(CLI + ARGS + ["--out", str(root)], capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    summary = json.loads(again.stdout)
    # what partial/ held when the run was reopened (a line the kill tore in half is recomputed), not the final count
    assert done_before - 1 <= summary["reused_generations"] <= done_before
    assert f"resuming run {summary['run_id']}" in again.stderr
    assert len(list_runs(root)) == 1  # the same run folder was finished, not a new one
    # every document generated exactly once across the two attempts
    lines = [json.loads(x) for p in root.glob("*/partial/generations.*.jsonl") for x in p.read_text().splitlines()]
    assert len(lines) == len({rec["key"] for rec in lines}) == 8
    assert _finished_samples(root) == _finished_samples(tmp_path / "full")


def test_cache_keeps_no_output_text_in_plain_and_still_loads_older_plain_files(tmp_path):
    """A model's answer can quote its GPQA question; the resume cache must not hold it readably."""
    from specdec_eval.evals.pipeline.resume import GenerationCache, request_key
    from specdec_eval.workers.config import SamplingParams
    from specdec_eval.workers.engine.engine import GenerationOutput

    quoted = "Which of these molecules is chiral? The answer is (B)."
    params = SamplingParams(max_new_tokens=8)
    out = GenerationOutput(0, [1, 2], [3, 4], quoted, "length")
    GenerationCache(tmp_path).put("prompt", params, out)
    (written,) = tmp_path.glob("generations.*.jsonl")
    assert "chiral" not in written.read_text()
    older = {"key": request_key("other", params), **{**out.__dict__, "text": "plain"}}
    (tmp_path / "generations.old.jsonl").write_text(json.dumps(older) + "\n")
    cache = GenerationCache(tmp_path)
    # Prompts are stored as a hash only (their token ids would give a GPQA question back): the rest round-trips.
    assert dataclasses.replace(cache.get("prompt", params), prompt_token_ids=[1, 2]) == out
    assert cache.get("prompt", params).prompt_token_ids == [] and '"prompt_token_ids"' not in written.read_text()
    assert cache.get("other", params).text == "plain"
