"""`run --endpoint URL --api-key KEY` (or a URL with user:password@) never writes the key or the
password anywhere a run records its command or configuration: manifest, summary, events, samples, the report."""

from __future__ import annotations

import sys

import pytest

from specdec_eval.redaction import redact_argv

from ...cli_helpers import run_cli
from ...llama_server import free_port


def test_redact_argv_hides_keys_passwords_and_url_users_only():
    argv = [
        "specdec-eval",
        "run",
        "--endpoint",
        "http://alice:pw-1@127.0.0.1:9/v1",
        "--api-key",
        "key-2",
        "--api-key=key-3",
        "--baseline-endpoint=https://tok-4@h.example/v1",
        "--model-key",
        "HF/model",
        "--model_args",
        "base_url=http://h,api_key=key-5,seed=1",
        "--tokenizer",
        "org@name",
        "--limit",
        "3",
    ]
    out = redact_argv(argv)
    assert out == [
        "specdec-eval",
        "run",
        "--endpoint",
        "http://***@127.0.0.1:9/v1",
        "--api-key",
        "***",
        "--api-key=***",
        "--baseline-endpoint=https://***@h.example/v1",
        "--model-key",
        "HF/model",
        "--model_args",
        "base_url=http://h,api_key=***,seed=1",
        "--tokenizer",
        "org@name",
        "--limit",
        "3",
    ]
    assert redact_argv(["run", "--api-key"]) == ["run", "--api-key"]  # a dangling option: nothing to hide


@pytest.mark.parametrize("how", ["url", "api-key"])
def test_an_endpoint_run_records_no_secret(how, tmp_path, capsys, monkeypatch):
    """A run against a dead port (each request fails and is recorded), then a report of it: no file holds the
    secret. sys.argv is what the manifest records, so it is the command line as a shell would pass it."""
    secret = "s3cret-27-" + how
    url = (
        f"http://probe-user:{secret}@127.0.0.1:{free_port()}/v1" if how == "url" else f"http://127.0.0.1:{free_port()}"
    )
    args = [
        "run",
        "--endpoint",
        url,
        "--served-model",
        "m",
        "--model",
        "tiny",
        "--tasks",
        "gsm8k_smoke",
        "--no-reference",
        "--limit",
        "1",
        "--max-output-len",
        "4",
        "--request-retries",
        "0",
        "--out",
        str(tmp_path / "runs"),
        *(["--api-key", secret] if how == "api-key" else []),
    ]
    monkeypatch.setattr(sys, "argv", ["specdec-eval", *args])
    code, out, err = run_cli(capsys, *args)
    assert code == 1, err  # the request failed: recorded as a failure, the run FAILs
    (run,) = (tmp_path / "runs").glob("*/manifest.json")
    report = run_cli(
        capsys, "report", str(run.parent), "-o", str(tmp_path / "r.html"), "--markdown", str(tmp_path / "r.md")
    )
    assert report[0] == 0, report[2]
    assert "***" in run.read_text()  # the command is recorded, redacted
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert {"manifest.json", "summary.json", "events.jsonl", "samples.parquet", "r.html", "r.md"} <= {
        p.name for p in files
    }
    leaks = [p for p in files if secret.encode() in p.read_bytes() or b"probe-user" in p.read_bytes()]
    assert not leaks and secret not in out + err
