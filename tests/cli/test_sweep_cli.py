"""`specdec-eval sweep` end to end on the tiny model: every cell run once, judged against the base, a cell `run`
refuses recorded as unable to start, a second invocation resuming (finished cells not rerun), and a server
template whose placeholders each cell fills (our own `serve` started by `run --serve-cmd`)."""

from __future__ import annotations

import json
import shlex
import socket
import sys

import pytest

from ..cli_helpers import run_cli

RUN = ("--model", "tiny", "--tasks", "gsm8k_smoke", "--no-reference", "--limit", "2", "--max-output-len", "8")


def _grid(folder) -> dict:
    return json.loads((folder / "grid.json").read_text(encoding="utf-8"))


@pytest.mark.slow
def test_engine_sweep_judges_cells_records_refusals_and_resumes(capsys, tmp_path):
    folder = tmp_path / "sw"
    argv = ("sweep", "--dir", str(folder), "--axis", "batch=1,2", "--axis", "kv-cache=v1,v9", "--", *RUN, "--spec")
    code, out, err = run_cli(capsys, *argv, "eagle3")
    assert code == 1, err  # two cells could not start: the sweep does not pass
    assert "sweep FAIL: 2 NOT-RUN of 4 cells: batch=1 kv-cache=v9: NOT-RUN (could not start: " in out
    assert "[1/4] batch=1 kv-cache=v1: running" in err and "[4/4] batch=2 kv-cache=v9: could not start" in err
    cells = {c["cell"]: c for c in _grid(folder)["cells"]}
    assert cells["batch=1 kv-cache=v1"]["verdict"] == "BASE"
    judged = cells["batch=2 kv-cache=v1"]
    assert judged["verdict"] == "PASS" and judged["outputs_identical"] == judged["outputs_compared"] == 2
    assert judged["acceptance_change"] is not None  # paired by document against the base
    assert judged["gates"]["gsm8k_smoke"]["lossless"] == "PASS"
    refused = cells["batch=1 kv-cache=v9"]
    assert refused["verdict"] == "NOT-RUN" and refused["status"] == "could not start" and "v9" in refused["error"]
    assert "<table>" in (folder / "report.html").read_text(encoding="utf-8")
    runs = [p for p in (folder / "runs").iterdir() if p.is_dir()]
    assert len(runs) == 3  # one shared baseline, two spec-dec cells

    (folder / "cells" / "batch=2-kv-cache=v1.json").unlink()  # as if the sweep had died in this cell
    code, out, err = run_cli(capsys, *argv, "eagle3")
    assert code == 1, err
    assert err.count("recorded earlier, not rerun") == 1  # the base; a refused cell is asked again
    assert "[2/4] batch=1 kv-cache=v9: running" in err and "[3/4] batch=2 kv-cache=v1: running" in err
    assert _grid(folder)["cells"][2]["verdict"] == "PASS"

    code, _, err = run_cli(capsys, *argv, "ngram")  # another sweep in the same folder: refused, nothing run
    assert code == 2 and "holds another sweep" in err


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_server_template_placeholders_are_filled_per_cell(capsys, tmp_path):
    port = _free_port()
    template = (
        f"{shlex.quote(sys.executable)} -m specdec_eval.cli.main serve --model tiny --device-memory 256MiB "
        f"--max-batch-size {{max_batch}} --port {port}"
    )
    folder = tmp_path / "served"
    code, out, err = run_cli(
        capsys,
        "sweep",
        "--dir",
        str(folder),
        "--axis",
        "max_batch=1,2",
        "--serve-cmd",
        template,
        "--",
        *RUN,
        "--endpoint",
        f"http://127.0.0.1:{port}",
        "--startup-timeout",
        "600",
    )
    assert code == 0, err
    first, second = _grid(folder)["cells"]
    assert first["verdict"] == "BASE" and second["verdict"] == "PASS", second
    assert second["outputs_identical"] == 2  # greedy outputs of our server do not depend on its batch size
    for cell, batch in ((first, 1), (second, 2)):
        manifest = json.loads((folder / "runs" / cell["run_dir"].split("/")[-1] / "manifest.json").read_text())
        assert f"--max-batch-size {batch} --port" in manifest["engine"]["server"]["command"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (("--axis", "batch=1,4", "--", "--out", "x"), "--out after --: the sweep sets it"),
        (("--axis", "batch"), "expected NAME=V1,V2"),
        (("--axis", "batch=1,4", "--", "--batch", "2"), "--axis batch and batch after -- both set it"),
        (("--axis", "batch=1,4", "--serve-cmd", "serve {seqs}"), "no --axis seqs=... fills it"),
        (("--axis", "batch=" + ",".join(map(str, range(2000)))), "the grid has 2000 cells (2000), more than"),
    ],
)
def test_usage_errors_are_one_line_and_run_nothing(capsys, tmp_path, argv, message):
    code, _, err = run_cli(capsys, "sweep", "--dir", str(tmp_path / "sw"), *argv)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "sw").exists()
