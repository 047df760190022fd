"""llama.cpp's own speculative decoding (prompt lookup, llama-cpp-python's server) judged end to end as a peer:
`run --endpoint SPEC --baseline-endpoint PLAIN --spec ngram --draft-len K` on the same GGUF with and without
drafting (tests/llama_server.py, one pair of servers per session). The README's recipe, on two questions."""

from __future__ import annotations

import json

import pytest
from specdec_eval.peers.server.metrics import NOT_REPORTED

from ...cli_helpers import run_cli
from ...llama_server import PEER_DRAFT_LEN, llama_pair  # noqa: F401 - the session's servers, a fixture


@pytest.mark.slow  # two real servers decoding SmolLM2: tens of seconds on the shared 2-core machine
def test_llama_cpp_prompt_lookup_is_judged_against_its_plain_twin(llama_pair, tmp_path, capsys):  # noqa: F811
    spec, plain = llama_pair
    code, stdout, err = run_cli(
        capsys,
        "run",
        "--endpoint",
        spec.url,
        "--baseline-endpoint",
        plain.url,
        "--spec",
        "ngram",
        "--draft-len",
        str(PEER_DRAFT_LEN),
        "--model",
        "smollm2",
        "--tasks",
        "gsm8k_smoke",
        "--limit",
        "2",
        "--num-fewshot",
        "0",
        "--max-output-len",
        "12",
        "--no-reference",
        "--concurrency",
        "1",
        "--out",
        str(tmp_path / "runs"),
        "--fresh",
        "--json",
    )
    assert code in (0, 1), err  # 1: the lossless gate failed on a divergence, which is a finding, not an error
    summary = json.loads(stdout)
    assert summary["spec"] == "ngram"  # the method declared truthfully: prompt lookup, as llama.cpp drafts
    assert summary["tasks"]["gsm8k_smoke"]["num_failed_requests"] == 0  # both servers answered (with logprobs)
    lossless = summary["tasks"]["gsm8k_smoke"]["lossless"]
    assert lossless["num_pairs"] == 2 and lossless["identical"] + lossless["divergent"] == 2
    assert all(isinstance(d["position"], int) for d in lossless["divergences"])
    # llama-cpp-python's answers carry no acceptance and it exports no spec-decode metrics: said, not invented
    assert summary["tasks"]["gsm8k_smoke"]["acceptance"] is None and "reported_acceptance" not in summary
    manifest = json.loads((tmp_path / "runs" / summary["run_id"] / "manifest.json").read_text())
    assert manifest["engine"]["server"]["acceptance_source"] == NOT_REPORTED
