"""The engine profiles' registry: one profile per engine module, picked by `--engine-profile` or by what the server
says it is; what each profile says the client asks for."""

from __future__ import annotations

import pytest
from specdec_eval.peers.client.config import EndpointConfig
from specdec_eval.peers.client.requests import gen_kwargs
from specdec_eval.peers.profiles import PROFILE_NAMES, PROFILES, pick_profile, profile_of_server
from specdec_eval.peers.server.watch import ServerWatch
from specdec_eval.workers.config import SamplingParams

from specdec_eval.errors import UserError


def test_one_profile_per_engine_module():
    assert set(PROFILES) == {"llamacpp", "sglang", "specdec-eval", "trtllm", "vllm"}
    assert PROFILE_NAMES[0] == "auto"


def test_the_server_names_its_profile_unless_one_is_named():
    assert pick_profile("auto", "vllm", "uvicorn") is PROFILES["vllm"]
    assert pick_profile("auto", None, "specdec-eval/0.1") is PROFILES["specdec-eval"]
    assert pick_profile("auto", "someone", "uvicorn") is None
    assert pick_profile("sglang", "vllm", None) is PROFILES["sglang"]  # the flag wins over the identity
    # llama-cpp-python's "me" picks its request defaults, never its log table (other servers say "me" too)
    assert profile_of_server("me", None) is PROFILES["llamacpp"]
    assert profile_of_server("me", None, loose=False) is None


def test_an_unknown_profile_is_one_line():
    with pytest.raises(UserError, match="unknown engine profile 'tgi'.*auto, llamacpp"):
        EndpointConfig(url="http://127.0.0.1:1", engine_profile="tgi")


def test_what_each_profile_asks_for():
    params = SamplingParams(temperature=0.7, logprobs=2)
    vllm = gen_kwargs(params, 1, token_ids=PROFILES["vllm"].names_tokens_by_id, profile=PROFILES["vllm"])
    assert vllm["return_token_ids"] and vllm["return_tokens_as_token_ids"] and "min_p" not in vllm
    ours = PROFILES["specdec-eval"]
    assert ours.names_tokens_by_id and not ours.returns_token_ids and ours.read_acceptance is not None
    sglang = gen_kwargs(params, 1, profile=PROFILES["sglang"])  # a strict server: nothing it was not asked for
    assert set(sglang) == {"until", "max_gen_toks", "temperature", "seed", "logprobs"}
    assert gen_kwargs(params, 1, profile=PROFILES["llamacpp"])["repeat_penalty"] == 1.0


def test_a_named_profile_picks_the_log_table_over_the_servers_identity(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("")
    watch = ServerWatch("http://127.0.0.1:1", log_path=str(log))
    try:
        watch.identify("vllm", "uvicorn", "sglang")  # the flag names SGLang, the model card vLLM
        assert watch.log.log_format == ("sglang", "from --engine-profile sglang")
        watch.identify("vllm", "uvicorn")  # no flag: the identity
        assert watch.log.log_format[0] == "vllm"
    finally:
        watch.close()
