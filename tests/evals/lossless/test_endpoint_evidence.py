"""Issue 38's lossless rules from the command line: `run --endpoint SPEC --baseline-endpoint PLAIN` against scripted
servers (tests/serve_helpers.StubServer). No verdict from evidence that is not there (a baseline that named no
alternative at the divergence, failed requests), and no baseline that is not a different engine process of the same
model and evaluation (the server itself, the noise-floor control, a run of our engine), refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ...cli_helpers import run_cli
from ...serve_helpers import StubServer

ANSWER = " The answer is 56."
K_DIV = 2  # where the speculating server's answer departs from the plain one


def _answers(tokenizer, mode: str):
    """A server's completions: `plain` (its top 5 at every token, a near-tie at K_DIV), `no-alternatives` (plain,
    but nothing besides its own token at K_DIV), `spec-far` (another token at K_DIV, which its own logits put 5.95
    nats above the plain one) or `refuse` (HTTP 400)."""
    plain = list(tokenizer.encode(ANSWER, add_special_tokens=False))
    alt = tokenizer.encode("X", add_special_tokens=False)[0]

    def answer(body: dict) -> tuple[int, dict]:
        if mode == "refuse":
            return 400, {"error": {"message": "refused"}}
        ids = list(plain)
        if mode == "spec-far":
            ids[K_DIV] = alt
        tops = []
        for i, token in enumerate(ids):
            top = {token: -0.05, **{token + d: -3.0 - d for d in (1, 2, 3) if token + d != alt}}
            if i == K_DIV:
                top[plain[K_DIV] if mode == "spec-far" else alt] = -6.0 if mode == "spec-far" else -0.05
                if mode == "no-alternatives":
                    top = {token: -0.05}
            tops.append(top)
        logprobs = {
            "tokens": [f"token_id:{t}" for t in ids],
            "token_logprobs": [-0.05] * len(ids),
            "top_logprobs": [{f"token_id:{t}": v for t, v in top.items()} for top in tops],
        }
        choice = {
            "index": 0,
            "text": tokenizer.decode(ids),
            "finish_reason": "stop",
            "token_ids": ids,
            "logprobs": logprobs,
        }
        return 200, {
            "id": "c",
            "object": "text_completion",
            "model": "fake",
            "choices": [choice],
            "usage": {"prompt_tokens": 3, "completion_tokens": len(ids)},
        }

    return answer


def _run(capsys, spec_url: str, base_url: str | None, out: Path, *extra: str) -> tuple[int, dict | None, str]:
    args = [
        "run",
        "--endpoint",
        spec_url,
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
        "--no-reference",
        "--max-output-len",
        "16",
        "--request-retries",
        "0",
        "--out",
        str(out),
        "--json",
        *extra,
    ]
    if base_url is not None:
        args += ["--baseline-endpoint", base_url]
    code, stdout, err = run_cli(capsys, *args)
    summary = json.loads(stdout[stdout.index("{") :]) if "{" in stdout else None
    return code, summary, err


def _lossless(summary: dict | None) -> dict:
    return summary["tasks"]["gsm8k_smoke"]["lossless"]


@pytest.fixture
def servers(tiny):
    tokenizer = tiny[1]
    with (
        StubServer(_answers(tokenizer, "spec-far"), model="fake") as spec,
        StubServer(_answers(tokenizer, "no-alternatives"), model="fake") as silent,
        StubServer(_answers(tokenizer, "refuse"), model="fake") as refusing,
    ):
        yield {"spec-far": spec.url, "no-alternatives": silent.url, "refuse": refusing.url}


def test_a_baseline_without_alternatives_is_judged_on_the_spec_sides_view_and_its_control_is_no_baseline(
    servers, tmp_path, capsys
):
    out = tmp_path / "runs"
    code, summary, err = _run(capsys, servers["spec-far"], servers["no-alternatives"], out, "--control")
    gate = _lossless(summary)
    # its bound of 0 was a "near-tie" on no evidence (PASS); the spec side's own logits put the baseline's token
    # 5.95 nats down, beyond any noise the control measured
    assert code == 1 and gate["verdict"] == "FAIL", gate["reason"]
    assert "beyond the noise bound" in gate["reason"] and "(5.95)" in gate["reason"]
    assert all(d["margins"]["from_reverse"] for d in gate["divergences"])
    manifests = [p / "manifest.json" for p in out.iterdir() if (p / "manifest.json").is_file()]
    control = next(m.parent.name for m in manifests if "noise_control" in m.read_text())
    code, _, err = _run(capsys, servers["spec-far"], None, out, "--baseline", control)
    assert code == 2 and err.strip().splitlines()[-1].startswith("specdec-eval: error: --baseline: run ")
    assert "is a noise-floor control" in err


def test_failed_requests_are_not_divergences_and_never_a_pass(servers, tmp_path, capsys):
    code, summary, _ = _run(capsys, servers["refuse"], servers["no-alternatives"], tmp_path / "runs")
    gate = _lossless(summary)
    assert code == 1 and gate["verdict"] == "NO-GATE"
    assert "4 request(s) failed on a side (doc 0, 1, 2, 3): not compared" in gate["reason"]
    assert "differ" not in gate["reason"] and gate["divergent"] == 0


@pytest.mark.parametrize(
    "extra, words",
    [
        (("--gpus", "2"), "--gpus 2 starts torchrun ranks of our engine"),
        (("--baseline", "paired"), "only our engine can do"),
    ],
    ids=["gpus", "paired"],
)
def test_what_an_endpoint_run_cannot_do_is_one_line(servers, tmp_path, capsys, extra, words):
    code, _, err = _run(capsys, servers["spec-far"], None, tmp_path / "runs", *extra)
    assert code == 2 and len(err.strip().splitlines()) == 1 and words in err


def test_a_server_is_never_its_own_baseline(servers, tmp_path, capsys):
    same = servers["spec-far"].replace("127.0.0.1", "localhost") + "/v1/"
    code, _, err = _run(capsys, servers["spec-far"], same, tmp_path / "runs")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "reach the same server" in err
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_a_run_of_our_engine_is_no_baseline_of_a_server(servers, tmp_path, capsys):
    out = tmp_path / "runs"
    code, stdout, _ = run_cli(
        capsys,
        "run",
        "--model",
        "tiny",
        "--device-memory",
        "256MiB",
        "--tasks",
        "gsm8k_smoke",
        "--limit",
        "2",
        "--no-reference",
        "--max-output-len",
        "16",
        "--out",
        str(out),
        "--json",
    )
    assert code == 0
    local = json.loads(stdout[stdout.index("{") :])["run_id"]
    code, _, err = _run(capsys, servers["spec-far"], None, out, "--baseline", local)
    assert code == 2 and "was decoded by our engine (local), this run by a server (endpoint)" in err
