"""llama.cpp's launch command, built once in its profile: the tests' servers and `selftest --clean` start it, and as a
`--serve-cmd` string it parses back into the argv it was built from."""

from __future__ import annotations

import shlex

from specdec_eval.evals.selftest import clean
from specdec_eval.peers.profiles.llamacpp import SERVED_MODEL, LlamaCppServeCommand
from specdec_eval.peers.server.process import ServerCommand

from ...llama_server import N_CTX, LlamaServer


def _option(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_the_command_round_trips_through_serve_cmd():
    cmd = LlamaCppServeCommand("/v/bin/python", "/m/smollm2 q4.gguf", 8123, draft_len=3, api_key="k")
    assert list(ServerCommand.parse(shlex.join(cmd.argv)).argv) == cmd.argv
    assert cmd.argv[:3] == ["/v/bin/python", "-m", "llama_cpp.server"]
    assert _option(cmd.argv, "--n_threads") == _option(cmd.argv, "--n_threads_batch") == "1"  # threads spin
    assert _option(cmd.argv, "--draft_model") == "prompt-lookup-decoding"
    assert _option(cmd.argv, "--draft_model_num_pred_tokens") == "3" and _option(cmd.argv, "--port") == "8123"
    plain = LlamaCppServeCommand("p", "m").argv
    assert "--draft_model" not in plain and "--port" not in plain and "--api_key" not in plain
    assert _option(plain, "--logits_all") == "false"


def test_the_tests_and_the_clean_matrix_start_the_profiles_command(tmp_path):
    server = LlamaServer(tmp_path, model=tmp_path / "m.gguf", draft_len=2, logits_all=True)
    argv = server.command()
    expected = LlamaCppServeCommand(argv[0], str(tmp_path / "m.gguf"), server.port, N_CTX, True, 2).argv
    assert argv == expected and _option(argv, "--model_alias") == SERVED_MODEL
    assert clean.LLAMA == " ".join(LlamaCppServeCommand("{py}", "{gguf}", logits_all=True).argv)
