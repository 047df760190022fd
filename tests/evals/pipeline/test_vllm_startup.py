"""A vLLM server that cannot start: `run --serve-cmd` stops in one line that says so, followed by the last lines of
vLLM's own log, where its reason stands (here a max model length beyond the model's positions, which vLLM refuses
while it builds its configuration, about 20 s after its start). Nothing is left running and no run is recorded."""

from __future__ import annotations

import re

import pytest

from ...cli_helpers import run_cli
from ...vllm_server import require_vllm, serve_command


@pytest.mark.slow
def test_a_vllm_server_that_cannot_start_is_named_with_its_logs_last_lines(tmp_path, capsys):
    require_vllm()
    spec = serve_command("eagle3", max_model_len=1_000_000)  # SmolLM2 has 8192 positions
    code, stdout, err = run_cli(
        capsys,
        "run",
        "--endpoint",
        spec.url,
        "--serve-cmd",
        str(spec),
        "--spec",
        "eagle3",
        "--draft-len",
        "3",
        "--model",
        "smollm2",
        "--tasks",
        "gsm8k_smoke",
        "--limit",
        "1",
        "--no-reference",
        "--startup-timeout",
        "420",
        "--out",
        str(tmp_path / "runs"),
    )
    assert code == 2, (code, stdout, err)
    assert "exited with status" in err and "before it answered" in err, err
    assert "last lines of" in err, err
    assert re.search(r"max[_-]model[_-]len", err, re.IGNORECASE), err  # vLLM's own reason, from its log
    assert not any((tmp_path / "runs").glob("*/summary.json"))
