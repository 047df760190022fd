"""The margin rule through `run --endpoint SPEC --baseline-endpoint PLAIN --control` against our own server in bf16
(tiny model): the control is the baseline server again at concurrency 1, and the lossless gate must find it (it is
keyed by the baseline server, which the spec-dec run's own identity cannot name: an endpoint run once judged
without its control, so a planted bug read NO-GATE instead of FAIL)."""

from __future__ import annotations

import json

from specdec_eval.workers.config import SpecConfig

from ...cli_helpers import run_cli
from ...serve_helpers import serving, tiny_engine


def _run(capsys, spec_url: str, plain_url: str, out: str):
    return run_cli(
        capsys,
        "run",
        "--endpoint",
        spec_url,
        "--baseline-endpoint",
        plain_url,
        "--spec",
        "eagle3",
        "--draft-len",
        "3",
        "--model",
        "tiny",
        "--tasks",
        "gsm8k_smoke",
        "--limit",
        "4",
        "--num-fewshot",
        "0",
        "--max-output-len",
        "16",
        "--no-reference",
        "--concurrency",
        "4",
        "--control",
        "--out",
        out,
        "--json",
    )


def test_an_endpoint_run_is_judged_against_its_control(tiny, tmp_path, capsys):
    bf16 = {"dtype": "bfloat16"}
    plain = tiny_engine(tiny, **bf16)
    clean = tiny_engine(tiny, spec=SpecConfig(max_draft_len=3), **bf16)
    buggy = tiny_engine(tiny, spec=SpecConfig(max_draft_len=3), inject=("emit_rejected_draft",), **bf16)
    out = str(tmp_path / "runs")
    with serving(plain) as base, serving(clean) as good, serving(buggy) as bad:
        code, stdout, err = _run(capsys, bad.url, base.url, out)
        assert "noise-floor control" in err
        planted = json.loads(stdout)["tasks"]["gsm8k_smoke"]["lossless"]
        code_clean, stdout_clean, err_clean = _run(capsys, good.url, base.url, out)
    assert planted["noise"]["num_noise_samples"] >= 20  # the control was found and measured the noise
    assert code == 1 and planted["verdict"] == "FAIL" and "beyond the noise bound" in planted["reason"]
    # A server this run did not start is known only by its URL, model id, owner and version, which another server
    # behind the same port shares (a recorded control once stood for a different fake's noise): measured again.
    assert "control is recorded" not in err_clean and "measured again each run" in err_clean
    kept = json.loads(stdout_clean)["tasks"]["gsm8k_smoke"]["lossless"]
    assert code_clean == 0 and kept["verdict"] == "PASS" and "noise" in kept, kept
