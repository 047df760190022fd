"""The vLLM server command the setup, the tests and the README use: as a `--serve-cmd` string it parses back (through
the run's own parser) into the environment and the argv it was built from, with the flags a small CPU needs."""

from __future__ import annotations

import pytest
from specdec_eval.peers.profiles.vllm import VLLMServeCommand
from specdec_eval.peers.server.process import ServerCommand


@pytest.mark.parametrize("method", [None, "eagle3", "ngram"])
def test_the_command_round_trips_through_serve_cmd(method, tmp_path):
    cmd = VLLMServeCommand(
        python="/v/bin/python", model_dir="/m/smollm2 hf", port=8123, method=method, head=str(tmp_path / "head")
    )
    parsed = ServerCommand.parse(str(cmd))
    assert dict(parsed.env) == {"VLLM_CPU_KVCACHE_SPACE": "1"}
    assert list(parsed.argv) == cmd.argv
    assert cmd.argv[:3] == ["/v/bin/python", "-m", "vllm.entrypoints.openai.api_server"]  # not the broken script
    assert "/m/smollm2 hf" in cmd.argv and "--enforce-eager" in cmd.argv
    assert cmd.argv[cmd.argv.index("--dtype") + 1] == "float32"
    speculates = method is not None
    assert ("--spec-method" in cmd.argv) == speculates and (
        "--per-request-spec-decode-metrics" in cmd.argv
    ) == speculates
    assert ("--spec-model" in cmd.argv) == (method == "eagle3")
    assert cmd.url == "http://127.0.0.1:8123"


def test_unknown_methods_and_a_headless_eagle3_are_refused():
    with pytest.raises(ValueError, match="unknown vLLM speculative method"):
        VLLMServeCommand(python="p", model_dir="m", port=1, method="medusa")
    with pytest.raises(ValueError, match="eagle3 needs a draft head"):
        VLLMServeCommand(python="p", model_dir="m", port=1, method="eagle3")
