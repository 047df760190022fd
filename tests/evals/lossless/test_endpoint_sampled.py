"""The sampled verdict through `run --endpoint SPEC --baseline-endpoint PLAIN` against our own servers (tiny model):
the spec-dec server samples with `--spec-sampling rejection`, the run decodes no baseline, the baseline server scores
the outputs through the completions API's echo + logprobs, and the verdict says it is conservative (only the top
logprobs known). A server whose rejection sampler is greedy FAILs."""

from __future__ import annotations

import json

from specdec_eval.workers.config import SpecConfig

from ...cli.test_run_cli import SHARED_DATA, needs_shared_data
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
        "gsm8k_sampled",
        "--data-dir",
        str(SHARED_DATA),
        "--limit",
        "2",
        "--num-fewshot",
        "0",
        "--max-output-len",
        "32",
        "--no-reference",
        "--concurrency",
        "2",
        "--out",
        out,
        "--json",
    )


@needs_shared_data
def test_a_served_rejection_sampler_is_judged_in_distribution_by_the_baseline_servers_scoring(tiny, tmp_path, capsys):
    rejection = SpecConfig(max_draft_len=3, sampling="rejection")
    plain = tiny_engine(tiny)
    clean = tiny_engine(tiny, spec=rejection)
    greedy = tiny_engine(tiny, spec=rejection, inject=("rejection_greedy",))
    with serving(plain) as base, serving(clean) as good, serving(greedy) as bad:
        code, stdout, err = _run(capsys, good.url, base.url, str(tmp_path / "clean"))
        code_bad, stdout_bad, _ = _run(capsys, bad.url, base.url, str(tmp_path / "greedy"))
    assert "judged in distribution" in err
    kept = json.loads(stdout)["tasks"]["gsm8k_sampled"]["lossless"]
    assert code == 0 and kept["verdict"] == "PASS", kept
    assert kept["baseline_kind"] == "scored" and kept["scorer"].startswith("the baseline server")
    assert kept["basis"] == "conservative" and kept["positions"] > 0
    planted = json.loads(stdout_bad)["tasks"]["gsm8k_sampled"]["lossless"]
    assert code_bad == 1 and planted["verdict"] == "FAIL", planted


@needs_shared_data
def test_a_correct_sampler_judged_through_the_legacy_echo_shape_never_fails(tiny, tmp_path, capsys):
    """The same plain server as the spec-dec side (a correct sampler by construction) and as the scorer, once read
    as vLLM-style prompt_logprobs and once behind a proxy that names its owner llama.cpp, so the scorer is asked in
    OpenAI's legacy shape (top alternatives keyed by text, where byte pieces that print alike merge): never a FAIL."""
    from ...fake_server_helpers import OwnerProxy

    with serving(tiny_engine(tiny)) as spec, serving(tiny_engine(tiny)) as base, OwnerProxy(base.url, "llamacpp") as p:
        verdicts = {}
        for name, url in (("ids", base.url), ("legacy", p.url)):
            code, stdout, err = _run(capsys, spec.url, url, str(tmp_path / name))
            assert code == 0, err[-2000:]
            verdicts[name] = json.loads(stdout)["tasks"]["gsm8k_sampled"]["lossless"]
    assert verdicts["ids"]["verdict"] == "PASS", verdicts["ids"]
    assert verdicts["legacy"]["verdict"] in ("PASS", "NO-GATE"), verdicts["legacy"]
