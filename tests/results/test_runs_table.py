"""The runs table: one row per recorded run, filters, GPU short names, `specdec-eval runs`.

`make_run` builds synthetic run folders with the run store's own writers; test_compare and test_decide use it.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import typer
from specdec_eval.cli.results_cmds import compare, decide, runs
from specdec_eval.results.runs_table import gpu_of, gpu_short_name, run_rows
from specdec_eval.results.sample_record import SampleRecord
from specdec_eval.results.store import Run
from typer.testing import CliRunner

from specdec_eval.errors import UserError

TEST = "accuracy/test_specdec.py::TestSmolLM2_135M::test_eagle3[v2_kv_cache-one_model-tp1]"
BASE_TIME = 1_790_000_000.0  # 2026-09-21T...Z


def make_run(
    root: Path,
    n: int,
    *,
    test_id: str = TEST,
    gpus: list[str] | None = None,
    device: str = "cuda",
    commit: str = "0123456789abcdef0123456789abcdef01234567",
    dirty: bool = False,
    tasks: dict[str, dict[str, Any]] | None = None,
    events: list[dict[str, Any]] | None = None,
    samples: list[dict[str, Any]] | None = None,
    config: dict[str, Any] | None = None,
    versions: dict[str, Any] | None = None,
    finished: bool = True,
) -> Run:
    """Run number n (its start time and id grow with n). tasks: name -> summary fields (score, threshold, verdict,
    ...); defaults to one passing gsm8k task."""
    started = BASE_TIME + 60 * n
    run = Run(Path(root) / f"20260921-{n:06d}-cfg{n % 7}")
    run.path.mkdir(parents=True)
    gpus = ["NVIDIA H200"] if gpus is None else gpus
    devices = {"host": "node1", "cpu": "x86_64", **({"gpus": gpus} if gpus else {})}
    config = config or {
        "engine": {
            "model": "smollm2",
            "device": device,
            "dtype": "auto",
            "tp_size": 1,
            "seed": 0,
            "kv_cache": {"version": "v2", "block_size": 16},
            "spec": {"algorithm": "eagle3", "max_draft_len": 3},
        },
        "eval": {"tasks": ["gsm8k"], "limit": None, "num_fewshot": 5, "max_output_len": 256, "seed": 0},
    }
    manifest = {
        "run_id": run.run_id,
        "config_key": "cfg",
        "test_id": test_id,
        "config": config,
        "commit": commit,
        "dirty": dirty,
        "versions": versions or {"python": "3.11.7", "torch": "2.6.0"},
        "devices": devices,
        "world_size": 1,
        "command": ["specdec-eval", "run"],
        "started": started,
    }
    run.write_manifest(manifest)
    events = events or []
    if events:
        run.write_events(events)
    if samples is not None:
        run.write_samples([SampleRecord.from_row(s) for s in samples])
    if not finished:
        return run
    tasks = tasks if tasks is not None else {"gsm8k": {"score": 50.0, "threshold": 40.0, "verdict": "PASS"}}
    counts: dict[str, int] = {}
    for e in events:
        counts[e["type"]] = counts.get(e["type"], 0) + 1
    failing = sum(v for k, v in counts.items() if k in ("spec_state_leak", "request_failed"))
    task_summaries = {
        name: {
            "num_samples": 10,
            "score": 0.0,
            "filter_scores": {},
            "reference": 55.0,
            "threshold": None,
            "theta": 5.0,
            "verdict": "PASS",
            "num_failed_requests": 0,
            "acceptance": None,
            "data": "x",
            "report": "",
            **t,
        }
        for name, t in tasks.items()
    }
    verdicts = [t["verdict"] for t in task_summaries.values()]
    run.write_summary(
        {
            "verdict": "FAIL" if "FAIL" in verdicts or failing else "PASS",
            "tasks": task_summaries,
            "events": counts,
            "failing_events": failing,
            "elapsed_s": 12.0,
            "model": "smollm2",
            "kv_cache": "v2",
            "spec": "eagle3",
            "world_size": 1,
            "run_id": run.run_id,
            "run_dir": str(run.path),
            "test_id": test_id,
        }
    )
    run.write_manifest({**manifest, "finished": started + 12.0, "elapsed_s": 12.0})
    return run


def cli_runner():
    """The commands on a local app; a UserError becomes exit status 2 with one line on stderr, as in cli/main.py."""
    app = typer.Typer(pretty_exceptions_enable=False)
    app.command("runs")(runs)
    app.command("compare")(compare)
    app.command("decide")(decide)
    runner = CliRunner()

    def invoke(*argv: str) -> SimpleNamespace:
        result = runner.invoke(app, list(argv))
        out = SimpleNamespace(
            exit_code=result.exit_code, stdout=result.stdout, stderr=result.stderr, exception=result.exception
        )
        if isinstance(result.exception, UserError):
            out.exit_code, out.stderr = 2, out.stderr + f"specdec-eval: error: {result.exception}\n"
        return out

    return invoke


@pytest.fixture
def cli():
    return cli_runner()


@pytest.mark.parametrize(
    ("name", "short"),
    [
        ("NVIDIA H200", "H200"),
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("NVIDIA A100-SXM4-80GB", "A100"),
        ("NVIDIA GeForce RTX 4090", "RTX_4090"),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "RTX_PRO_6000"),
        ("Tesla V100-SXM2-16GB", "V100"),
        ("NVIDIA GH200 480GB", "GH200"),
        ("NVIDIA L40S", "L40S"),
        ("AMD Instinct MI300X", "MI300X"),
    ],
)
def test_gpu_short_names(name, short):
    assert gpu_short_name(name) == short
    assert gpu_of({"config": {"engine": {"device": "auto"}}, "devices": {"gpus": [name, name]}}) == short


def test_gpu_of_cpu_runs_and_mixed_hosts():
    assert gpu_of({"config": {"engine": {"device": "auto"}}, "devices": {"host": "vm", "cpu": "x86_64"}}) == "CPU"
    # a CPU run on a GPU host is a CPU run
    assert gpu_of({"config": {"engine": {"device": "cpu"}}, "devices": {"gpus": ["NVIDIA H200"]}}) == "CPU"
    assert gpu_of({"devices": {"gpus": ["NVIDIA H100 PCIe", "NVIDIA L40S"]}}) == "H100+L40S"


def test_rows_newest_last_with_filters(tmp_path):
    make_run(tmp_path, 3, gpus=["NVIDIA H100 80GB HBM3"], commit="feedface" + "0" * 32, dirty=True)
    make_run(tmp_path, 1)
    make_run(tmp_path, 2, test_id="accuracy/test_specdec.py::TestOther::test_auto_dtype[v1_kv_cache-tp1]")
    make_run(tmp_path, 4, device="cpu")
    rows = run_rows(tmp_path)
    assert [r["run_id"][-11:] for r in rows] == ["000001-cfg1", "000002-cfg2", "000003-cfg3", "000004-cfg4"]
    row = rows[2]
    assert row["commit"] == "feedface00*" and row["gpu"] == "H100" and row["started"] == "2026-09-21T14:16:20Z"
    assert row["tasks"] == {
        "gsm8k": {
            "score": 50.0,
            "reference": 55.0,
            "threshold": 40.0,
            "verdict": "PASS",
            "num_samples": 10,
            "lossless": None,
            "lossless_reason": None,
            "acceptance_gate": None,
            "acceptance_reason": None,
            "acceptance_underpowered": False,
        }
    }
    assert row["verdict"] == "PASS" and row["finished"] and row["num_failing_events"] == 0
    assert [r["gpu"] for r in run_rows(tmp_path, gpu="H200")] == ["H200", "H200"]
    assert [r["gpu"] for r in run_rows(tmp_path, gpu="CPU")] == ["CPU"]
    assert run_rows(tmp_path, gpu="H20") == [] and run_rows(tmp_path, gpu="h200") == []  # exact
    assert len(run_rows(tmp_path, test_id=TEST)) == 3
    assert run_rows(tmp_path, test_id=TEST[:-1]) == []  # exact, not a prefix
    assert [r["commit"] for r in run_rows(tmp_path, commit="FEEDF")] == ["feedface00*"]  # prefix
    assert run_rows(tmp_path, commit="eedface") == []
    assert run_rows(tmp_path / "missing") == []


def test_unfinished_and_failing_runs(tmp_path):
    leak = {"ts": 1.0, "rank": 0, "type": "spec_state_leak", "fields": ["hidden"]}
    make_run(tmp_path, 1, events=[leak, {"ts": 2.0, "rank": 1, "type": "request_retried"}])
    make_run(tmp_path, 2, finished=False)
    (tmp_path / "not-a-run").mkdir()  # no manifest: not listed
    broken = make_run(tmp_path, 3)
    (broken.path / "summary.json").write_text("{torn")  # unreadable: left out
    failing, unfinished = run_rows(tmp_path)
    assert failing["verdict"] == "FAIL" and failing["failing_events"] == {"spec_state_leak": 1}
    assert failing["events"] == {"spec_state_leak": 1, "request_retried": 1} and failing["num_failing_events"] == 1
    assert unfinished["verdict"] == "unfinished" and not unfinished["finished"] and unfinished["tasks"] == {}


def test_cli_runs_table_and_json(cli, tmp_path):
    make_run(
        tmp_path,
        1,
        tasks={
            "gsm8k": {"score": 41.2, "threshold": 40.0, "verdict": "PASS"},
            "gpqa_diamond": {"score": 30.3, "threshold": 20.0, "verdict": "NO-GATE"},
        },
    )
    make_run(tmp_path, 2, finished=False)
    result = cli("runs", "--root", str(tmp_path))
    assert result.exit_code == 0, result.output
    header, first, second, third = result.stdout.splitlines()
    assert header.split() == ["RUN", "STARTED", "COMMIT", "TEST", "GPU", "TASKS", "VERDICT", "FAILING"]
    # tasks one per line, in the summary's (sorted) order
    assert TEST in first and "gpqa_diamond 30.30 NO-GATE" in first and "H200" in first and "0123456789" in first
    assert "gsm8k 41.20 PASS" in second
    assert "unfinished" in third
    listing = json.loads(cli("runs", "--root", str(tmp_path), "--json").stdout)
    rows = listing["runs"]
    assert [r["verdict"] for r in rows] == ["PASS", "unfinished"] and listing["unreadable"] == []
    assert rows[0]["tasks"]["gpqa_diamond"]["score"] == 30.3
    assert json.loads(cli("runs", "--root", str(tmp_path), "--gpu", "B200", "--json").stdout) == {
        "runs": [],
        "unreadable": [],
    }
    result = cli("runs", "--root", str(tmp_path / "missing"))
    assert result.exit_code == 2 and "no run store" in result.stderr
