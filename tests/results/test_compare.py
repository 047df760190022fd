"""`compare`: two synthetic runs paired sample by sample (McNemar, output identity, deltas, config/env diff)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from specdec_eval.results.compare import compare_runs, diff_dicts, flatten, render_compare

from .test_runs_table import cli_runner, make_run

N = 40


def samples(correct: list[bool], tokens: list[list[int]], task: str = "gsm8k", prompt: str = "p") -> list[dict]:
    out = []
    for doc, (ok, ids) in enumerate(zip(correct, tokens, strict=True)):
        out.append(
            {
                "task": task,
                "doc_id": doc,
                "doc_hash": f"d{doc}",
                "prompt_hash": f"{prompt}{doc}",
                "target": "18",
                "output": "text",
                "output_hash": ",".join(map(str, ids)),
                "num_output_tokens": len(ids),
                "output_token_ids": ids,
                "finish_reason": "stop",
                "error": None,
                "acceptance_length": 2.0,
                "extracted[strict-match]": "18" if ok else "[invalid]",
                "correct[strict-match]": ok,
                "extracted[flexible-extract]": "18" if ok else "7",
                "correct[flexible-extract]": ok,
            }
        )
    return out


def task_summary(correct: list[bool], acceptance: float | None = None) -> dict[str, Any]:
    score = 100.0 * sum(correct) / len(correct)
    return {
        "score": score,
        "filter_scores": {"strict-match": score, "flexible-extract": score},
        "threshold": 30.0,
        "verdict": "PASS",
        "acceptance": None if acceptance is None else {"acceptance_length": acceptance, "acceptance_rate": 0.4},
        "num_samples": len(correct),
    }


BASE_CORRECT = [d % 2 == 0 or d % 3 == 0 for d in range(N)]  # 27 of 40 right
BASE_TOKENS = [[100 + d, 7, 8, 9, 10 + d] for d in range(N)]


def pair(tmp_path, correct_b=BASE_CORRECT, tokens_b=BASE_TOKENS, **b_kwargs):
    a = make_run(
        tmp_path, 1, samples=samples(BASE_CORRECT, BASE_TOKENS), tasks={"gsm8k": task_summary(BASE_CORRECT, 2.5)}
    )
    b_kwargs.setdefault("tasks", {"gsm8k": task_summary(correct_b, 2.5)})
    b = make_run(tmp_path, 2, samples=samples(correct_b, tokens_b), **b_kwargs)
    return a, b


def test_identical_runs_show_no_change(tmp_path):
    a, b = pair(tmp_path)
    result = compare_runs(a, b)
    t = result["tasks"]["gsm8k"]
    assert result["verdict"] == t["verdict"] == "no significant change"
    assert t["n"] == N and t["mcnemar"] == {"filter": "flexible-extract", "b": 0, "c": 0, "p": 1.0}
    assert t["outputs"] == {"identical": N, "divergent": 0, "identical_rate": 1.0, "first_divergence": []}
    assert t["delta"] == 0.0 and t["accuracy_a"]["score"] == pytest.approx(67.5)
    acceptance = t["acceptance"]
    assert (acceptance["a"], acceptance["b"], acceptance["delta"]) == (2.5, 2.5, 0.0)
    per = acceptance["per_document"]  # these samples carry ALs only: each document weighs one
    assert (per["n"], per["al_a"], per["al_b"], per["relative"], per["std_error"]) == (N, 2.0, 2.0, 0.0, 0.0)
    assert per["verdict"] == "NO-DROP" and not per["drop_shown"] and not per["weighted"] and per["unpaired"] == 0
    assert result["acceptance_drops"] == []
    assert result["config_diff"] == [] and result["environment_diff"] == [] and result["events"] == {}
    assert json.loads(json.dumps(result)) == result  # JSON-able as is
    text = render_compare(result)
    assert "40/40 token-identical (100.0%)" in text and "configuration: identical" in text
    assert text.rstrip().endswith("verdict: no significant change (alpha 0.05, McNemar on flexible-extract)")


def test_b_wrong_on_twelve_docs_is_a_regression(tmp_path):
    flipped = [d for d in range(N) if BASE_CORRECT[d]][:12]
    correct_b = [ok and d not in flipped for d, ok in enumerate(BASE_CORRECT)]
    tokens_b = [ids[: d % 4] + [999] + ids[d % 4 + 1 :] if d in flipped else ids for d, ids in enumerate(BASE_TOKENS)]
    a, b = pair(tmp_path, correct_b, tokens_b, tasks={"gsm8k": task_summary(correct_b, 2.1)})
    result = compare_runs(a, b)
    t = result["tasks"]["gsm8k"]
    assert t["mcnemar"]["b"] == 12 and t["mcnemar"]["c"] == 0
    assert t["mcnemar"]["p"] == pytest.approx(2 / 4096) and t["mcnemar"]["p"] < 0.05
    assert t["verdict"] == result["verdict"] == "regression"
    assert t["delta"] == pytest.approx(-30.0) and t["filter_deltas"]["strict-match"] == pytest.approx(-30.0)
    assert t["paired_accuracy"] == {"a": 67.5, "b": 37.5}
    assert t["outputs"]["identical"] == N - 12 and t["outputs"]["divergent"] == 12
    assert t["outputs"]["identical_rate"] == pytest.approx(28 / 40)
    assert t["outputs"]["first_divergence"] == [{"doc_id": d, "position": d % 4} for d in flipped]
    assert t["acceptance"]["delta"] == pytest.approx(-0.4)
    text = render_compare(result)
    assert "12 right only in A, 0 right only in B, p = 0.0004883 -> regression" in text
    assert "first divergence (doc @ token): doc 0 @ 0, doc 2 @ 2, doc 3 @ 3" in text and "... 2 more" in text
    # B against A the other way round: the same docs, an improvement
    assert compare_runs(b, a)["verdict"] == "improvement"
    # a stricter alpha than the p-value: no significant change
    assert compare_runs(a, b, alpha=0.0001)["verdict"] == "no significant change"


def test_config_and_environment_diff_list_changed_keys(tmp_path):
    config = {
        "engine": {
            "model": "smollm2",
            "device": "cuda",
            "dtype": "auto",
            "tp_size": 1,
            "seed": 0,
            "kv_cache": {"version": "v1", "block_size": 16},
            "spec": None,
        },
        "eval": {"tasks": ["gsm8k"], "limit": 40, "num_fewshot": 5, "max_output_len": 256, "seed": 0},
    }
    leak = {"ts": 1.0, "rank": 0, "type": "spec_state_leak", "fields": ["x"]}
    retry = {"ts": 2.0, "rank": 0, "type": "request_retried"}
    a, b = pair(
        tmp_path,
        commit="b" * 40,
        dirty=True,
        gpus=["NVIDIA H100 80GB HBM3"],
        config=config,
        versions={"python": "3.11.7", "torch": "2.7.0"},
        events=[leak, retry, retry],
    )
    result = compare_runs(a, b)
    config_keys = [r["key"] for r in result["config_diff"]]
    assert "engine.kv_cache.version" in config_keys and "eval.limit" in config_keys
    assert "engine.spec" in config_keys and "engine.spec.algorithm" in config_keys
    assert "engine.model" not in config_keys and "eval.tasks" not in config_keys
    row = next(r for r in result["config_diff"] if r["key"] == "engine.kv_cache.version")
    assert (row["a"], row["b"]) == ("v2", "v1")
    env = {r["key"]: (r["a"], r["b"]) for r in result["environment_diff"]}
    assert env == {
        "commit": ("0123456789abcdef0123456789abcdef01234567", "b" * 40),
        "dirty": (False, True),
        "devices.gpus": (["NVIDIA H200"], ["NVIDIA H100 80GB HBM3"]),
        "versions.torch": ("2.6.0", "2.7.0"),
    }
    assert result["events"] == {
        "request_retried": {"a": 0, "b": 2, "delta": 2},
        "spec_state_leak": {"a": 0, "b": 1, "delta": 1},
    }
    text = render_compare(result)
    assert "engine.kv_cache.version: 'v2' -> 'v1'" in text and "environment differs in 4 key(s):" in text
    assert "spec_state_leak 0 -> 1 (+1)" in text


def test_flatten_and_diff():
    assert flatten({"a": {"b": 1, "c": {"d": [1, 2]}, "e": {}}, "f": None}) == {
        "a.b": 1,
        "a.c.d": [1, 2],
        "a.e": {},
        "f": None,
    }
    assert diff_dicts({"x": 1, "y": 2}, {"x": 1, "z": 3}) == [
        {"key": "y", "a": 2, "b": None, "missing": "b"},
        {"key": "z", "a": None, "b": 3, "missing": "a"},
    ]


def test_unpaired_docs_and_old_runs_without_token_ids(tmp_path):
    a = make_run(tmp_path, 1, samples=samples(BASE_CORRECT, BASE_TOKENS))
    old = samples(BASE_CORRECT[:30], BASE_TOKENS[:30])
    for s in old:
        del s["output_token_ids"]  # recorded before token ids were stored: identity from output_hash
    old[5]["output_hash"] = "changed"
    b = make_run(tmp_path, 2, samples=old)
    t = compare_runs(a, b)["tasks"]["gsm8k"]
    assert t["n"] == 30 and t["unpaired"] == {"only_a": list(range(30, 40)), "only_b": []}
    assert t["outputs"]["first_divergence"] == [{"doc_id": 5, "position": None}]
    assert "unpaired docs: 10 only in A, 0 only in B" in render_compare(compare_runs(a, b))


def test_cli_compare(tmp_path):
    cli = cli_runner()
    root = str(tmp_path)
    flipped = [d for d in range(N) if BASE_CORRECT[d]][:12]
    correct_b = [ok and d not in flipped for d, ok in enumerate(BASE_CORRECT)]
    a, b = pair(tmp_path, correct_b)
    result = cli("compare", a.run_id, b.run_id, "--root", root)
    assert result.exit_code == 1 and "-> regression" in result.stdout
    result = cli("compare", str(a.path), str(a.path), "--json")  # folder paths, no --root needed
    assert result.exit_code == 0 and json.loads(result.stdout)["verdict"] == "no significant change"
    result = cli("compare", "20260921-000001", "20260921-000002", "--root", root, "--alpha", "0.0001", "--json")
    assert result.exit_code == 0 and json.loads(result.stdout)["tasks"]["gsm8k"]["mcnemar"]["b"] == 12
    # errors: unknown run, ambiguous prefix, different prompts, unfinished run, bad alpha
    assert "no run 'nope'" in cli("compare", "nope", b.run_id, "--root", root).stderr
    assert "matches 2 runs" in cli("compare", "20260921", b.run_id, "--root", root).stderr
    other = make_run(tmp_path, 3, samples=samples(BASE_CORRECT, BASE_TOKENS, prompt="q"))
    result = cli("compare", a.run_id, other.run_id, "--root", root)
    assert result.exit_code == 2 and "different prompts" in result.stderr
    unfinished = make_run(tmp_path, 4, finished=False)
    result = cli("compare", a.run_id, unfinished.run_id, "--root", root)
    assert result.exit_code == 2 and "unfinished" in result.stderr
    assert cli("compare", a.run_id, b.run_id, "--root", root, "--alpha", "1.5").exit_code == 2
    result = cli("compare", a.run_id, b.run_id, "--root", root, "--filter", "exact")
    assert result.exit_code == 2 and "no per-sample correctness for filter 'exact'" in result.stderr
    assert "(it has: flexible-extract, strict-match)" in result.stderr
    result = cli("compare", a.run_id, b.run_id, "--root", root, "--filter", "strict-match", "--json")
    assert json.loads(result.stdout)["tasks"]["gsm8k"]["mcnemar"]["filter"] == "strict-match"
