"""`specdec-eval run` in-process, end to end on the tiny preset, plus the lm-eval adapter (registration, model
args, generation kwargs).

Every run passes --device-memory 256MiB: the default 4 GiB CPU budget spends seconds zero-filling a KV pool
that a few short requests never use.
"""

from __future__ import annotations

import functools
import json
import textwrap
from pathlib import Path

import pytest
from specdec_eval.evals.gates import references

from specdec_eval.errors import UserError

from ..cli_helpers import run_cli

SHARED_DATA = Path(__file__).resolve().parents[3] / "shared" / "data"  # ../shared/data, as the Makefile
FAST = ("--model", "tiny", "--device-memory", "256MiB")
needs_shared_data = pytest.mark.skipif(
    not (SHARED_DATA / "gsm8k" / "test.jsonl").is_file() or not (SHARED_DATA / "gpqa" / "dataset.zip").is_file(),
    reason="no shared GSM8K / GPQA data",
)


def test_smoke_run_without_references(capsys, tmp_path):
    code, out, err = run_cli(
        capsys,
        "run",
        "--tasks",
        "gsm8k_smoke,gpqa_diamond_smoke",
        "--limit",
        "2",
        "--max-output-len",
        "8",
        *FAST,
        "--out",
        str(tmp_path / "runs"),
    )
    assert code == 0, err
    assert "gsm8k_smoke: 2 samples from smoke:" in out
    assert "gpqa_diamond_smoke: 2 samples from smoke:" in out
    assert "gsm8k_smoke: no reference (score only)" in out
    assert "gpqa_diamond_smoke: no reference (score only)" in out
    summary_lines = [
        line.split() for line in out.splitlines() if line.startswith(("gsm8k_smoke ", "gpqa_diamond_smoke "))
    ]
    assert [(s[0], s[-1]) for s in summary_lines] == [("gsm8k_smoke", "REPORT"), ("gpqa_diamond_smoke", "REPORT")]
    assert "filters: strict-match" in out
    assert out.rstrip().splitlines()[-1].startswith("run NO-GATE (no gate could fail this run) in ")  # no reference


def test_smoke_run_json(capsys, tmp_path):
    code, out, err = run_cli(
        capsys,
        "run",
        "--tasks",
        "gsm8k_smoke,gpqa_diamond_smoke",
        "--limit",
        "2",
        "--max-output-len",
        "8",
        "--json",
        *FAST,
        "--out",
        str(tmp_path / "runs"),
    )
    assert code == 0, err
    summary = json.loads(out)  # stdout holds the JSON and nothing else (progress goes to stderr)
    assert summary["verdict"] == "PASS"
    assert list(summary["tasks"]) == ["gsm8k_smoke", "gpqa_diamond_smoke"]
    for task in summary["tasks"].values():
        assert task["num_samples"] == 2
        assert 0.0 <= task["score"] <= 100.0
        assert set(task["filter_scores"]) == {"strict-match", "flexible-extract"}
        assert task["score"] == pytest.approx(sum(task["filter_scores"].values()) / 2, abs=1e-3)
        assert task["verdict"] == "REPORT" and task["reference"] is None and task["threshold"] is None
        assert task["num_failed_requests"] == 0
    assert summary["model"] == "tiny" and summary["spec"] is None


def test_unknown_task_is_one_line_and_exit_2(capsys, tmp_path):
    code, out, err = run_cli(capsys, "run", "--tasks", "nope", *FAST, "--out", str(tmp_path / "runs"))
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("specdec-eval: error: unknown task 'nope'")
    assert "gsm8k" in lines[0] and "gpqa_diamond" in lines[0]
    assert out == ""


def test_missing_data_dir_is_exit_2(capsys, tmp_path):
    missing = tmp_path / "nonexistent"  # not /nonexistent: that existed on one machine and the test failed there
    code, out, err = run_cli(
        capsys,
        "run",
        "--tasks",
        "gsm8k",
        "--data-dir",
        str(missing),
        "--no-reference",
        *FAST,
        "--out",
        str(tmp_path / "runs"),
    )
    assert code == 2
    assert err.strip().splitlines()[-1] == f"specdec-eval: error: --data-dir {missing} is not a folder"


def test_missing_data_dir_with_reference_lookup_is_exit_2(capsys, tmp_path):
    """Also without --no-reference (whichever check runs first), a one-line exit 2."""
    missing = tmp_path / "nonexistent"
    code, out, err = run_cli(
        capsys, "run", "--tasks", "gsm8k", "--data-dir", str(missing), *FAST, "--out", str(tmp_path / "runs")
    )
    assert code == 2
    last = err.strip().splitlines()[-1]
    assert last.startswith("specdec-eval: error: ")
    assert "--no-reference" in last or str(missing) in last


def test_reference_dir_default_is_bound_at_definition():
    """Documents why the tests below patch the runner's `lookup` and not REFERENCE_DIR: lookup's default
    argument was evaluated when the function was defined, so rebinding the module constant changes nothing."""
    assert references.lookup.__defaults__[0] == references.REFERENCE_DIR  # (reference_dir, conditions)


@pytest.fixture
def reference_dir(tmp_path, monkeypatch):
    """Point the run at reference YAMLs in tmp_path."""
    from specdec_eval.evals.pipeline import evaluation as runner

    folder = tmp_path / "refs"
    folder.mkdir()
    monkeypatch.setattr(runner, "lookup", functools.partial(references.lookup, reference_dir=folder))
    return folder


@needs_shared_data
def test_run_with_references_prints_the_hypothesis_report(capsys, reference_dir, tmp_path):
    """GSM8K with a reference pinned to n = 1319 (so the gate can fail: the random tiny model scores ~0) and
    GPQA-Diamond with a reference near chance (the gate cannot fail at n = 3: NO-GATE)."""
    (reference_dir / "gsm8k.yaml").write_text(
        textwrap.dedent("""\
            X:
              - accuracy: 50.0
                num_samples: 1319
                command: test fixture
            """),
        encoding="utf-8",
    )
    (reference_dir / "gpqa_diamond.yaml").write_text("X:\n  - accuracy: 30.0\n    source: test fixture\n")
    code, out, err = run_cli(
        capsys,
        "run",
        "--tasks",
        "gsm8k,gpqa_diamond",
        "--limit",
        "3",
        "--max-output-len",
        "8",
        "--num-fewshot",
        "1",
        "--data-dir",
        str(SHARED_DATA),
        "--model-key",
        "X",
        *FAST,
        "--out",
        str(tmp_path / "runs"),
    )
    assert code == 1, err  # a FAIL verdict is exit status 1
    assert out.count("= ACCURACY HYPOTHESIS TESTING") == 2
    assert "Threshold: 46.797" in out  # 50 - 1.644854 * sqrt(2 * 50^2 / 1319)
    assert "Theta (Minimum detectable effect): 4.841" in out
    assert "#Samples: 1319" in out and "#Samples: 3" in out
    assert "Reference accuracy: 50.000" in out and "Reference accuracy: 30.000" in out
    verdicts = [line for line in out.splitlines() if line.startswith("Verdict: ")]
    assert len(verdicts) == 2
    assert verdicts[0] == "Verdict: FAIL"  # GSM8K: a random model is far below 46.8
    assert verdicts[1] in ("Verdict: NO-GATE", "Verdict: FAIL")
    if verdicts[1] == "Verdict: NO-GATE":
        assert "a model answering at random passes this gate" in out
    assert "gsm8k: 3 samples from local:" in out and "gpqa_diamond: 3 samples from local:" in out
    summary = [line.split() for line in out.splitlines() if line.startswith(("gsm8k ", "gpqa_diamond "))]
    assert [s[0] for s in summary] == ["gsm8k", "gpqa_diamond"] and summary[0][-1] == "FAIL"
    assert "ref 50.00 thr 46.80 theta 4.84" in out
    assert out.rstrip().splitlines()[-1].startswith("run FAIL in ")


@needs_shared_data
def test_run_with_unknown_model_key_is_exit_2(capsys, reference_dir, tmp_path):
    (reference_dir / "gsm8k.yaml").write_text("X:\n  - accuracy: 50.0\n    command: test fixture\n")
    code, out, err = run_cli(
        capsys,
        "run",
        "--tasks",
        "gsm8k",
        "--limit",
        "1",
        "--model-key",
        "Y",
        "--data-dir",
        str(SHARED_DATA),
        *FAST,
        "--out",
        str(tmp_path / "runs"),
    )
    assert code == 2
    last = err.strip().splitlines()[-1]
    assert "'Y'" in last and "--no-reference" in last


# --- the lm-eval adapter ----------------------------------------------------------------------------------


def test_registered_with_lm_eval():
    import lm_eval.api.registry
    from specdec_eval.evals.pipeline.lm_adapter import SpecDecLM

    assert lm_eval.api.registry.get_model("specdec") is SpecDecLM


def test_create_from_arg_string_builds_the_engine(monkeypatch):
    from specdec_eval.evals.pipeline.lm_adapter import SpecDecLM
    from specdec_eval.workers.memory import device

    monkeypatch.setattr(device, "DEFAULT_CPU_BUDGET", 256 * 2**20)  # read at engine build time
    lm = SpecDecLM.create_from_arg_string("model=tiny,kv_cache=v2,spec=eagle3,draft_len=2")
    config = lm.engine.config
    assert config.model == "tiny" and config.kv_cache.version == "v2"
    assert config.spec is not None and config.spec.algorithm == "eagle3" and config.spec.max_draft_len == 2
    assert lm.get_model_info() == {"model": "tiny", "kv_cache": "v2", "spec": "eagle3"}
    assert lm.max_gen_toks == 256


def test_create_from_arg_string_options_without_building(monkeypatch):
    from specdec_eval.evals.pipeline import lm_adapter

    built = []

    class FakeEngine:
        def __init__(self, config):
            built.append(config)
            self.config = config

        @classmethod
        def build(cls, config):
            return cls(config)

    monkeypatch.setattr(lm_adapter, "Engine", FakeEngine)
    lm = lm_adapter.SpecDecLM.create_from_arg_string(
        "model=tiny,dtype=float32,device=cpu,max_batch_size=4,max_seq_len=512,seed=7,max_gen_toks=32",
        {"batch_size": 8, "max_batch_size": None, "device": "cuda"},  # lm-eval's own flags: ignored
    )
    (config,) = built
    assert (config.dtype, config.device, config.max_batch_size, config.max_seq_len, config.seed) == (
        "float32",
        "cpu",
        4,
        512,
        7,
    )
    assert config.spec is None and config.kv_cache.version == "v1"
    assert lm.max_gen_toks == 32
    lm_adapter.SpecDecLM.create_from_arg_string("model=tiny,spec=none")
    assert built[-1].spec is None


@pytest.mark.parametrize("arg_string", ["model=tiny,temperature=0.5", "model=tiny,tp=2", "modle=tiny"])
def test_unknown_model_arg(arg_string):
    from specdec_eval.evals.pipeline.lm_adapter import SpecDecLM

    with pytest.raises(UserError, match="unknown specdec model_args"):
        SpecDecLM.create_from_arg_string(arg_string)


def test_sampling_from_gen_kwargs():
    from specdec_eval.evals.pipeline.lm_adapter import sampling_from_gen_kwargs

    # the exact kwargs lm-eval sends for gsm8k
    s = sampling_from_gen_kwargs(
        {"until": ["Question:", "</s>", "<|im_end|>"], "do_sample": False, "temperature": 0.0}, 256
    )
    assert s.stop == ("Question:", "</s>", "<|im_end|>") and s.max_new_tokens == 256 and s.temperature == 0.0
    # a single string `until`, empty strings dropped
    assert sampling_from_gen_kwargs({"until": "Q:"}, 10).stop == ("Q:",)
    assert sampling_from_gen_kwargs({"until": ["", "x"]}, 10).stop == ("x",)
    assert sampling_from_gen_kwargs({}, 10).stop == ()
    assert sampling_from_gen_kwargs({"until": None}, 10).stop == ()
    # the max-token aliases, in lm-eval's precedence order; the default only when none is given
    assert sampling_from_gen_kwargs({"max_gen_toks": 5}, 10).max_new_tokens == 5
    assert sampling_from_gen_kwargs({"max_new_tokens": 6}, 10).max_new_tokens == 6
    assert sampling_from_gen_kwargs({"max_tokens": 7}, 10).max_new_tokens == 7
    assert sampling_from_gen_kwargs({"max_completion_tokens": 8}, 10).max_new_tokens == 8
    both = {"max_new_tokens": 6, "max_gen_toks": 5, "max_tokens": 7, "max_completion_tokens": 8}
    assert sampling_from_gen_kwargs(both, 10).max_new_tokens == 5
    assert sampling_from_gen_kwargs({"max_new_tokens": 6, "max_tokens": 7}, 10).max_new_tokens == 6
    assert sampling_from_gen_kwargs({"max_gen_toks": None, "max_new_tokens": "9"}, 10).max_new_tokens == 9
    # do_sample=False forces greedy whatever the temperature; sampling keeps it
    assert sampling_from_gen_kwargs({"do_sample": False, "temperature": 0.7}, 10).temperature == 0.0
    assert sampling_from_gen_kwargs({"temperature": 0.7}, 10).temperature == 0.0  # do_sample defaults to False
    sampled = sampling_from_gen_kwargs({"do_sample": True, "temperature": 0.7, "top_p": 0.9, "top_k": 40}, 10)
    assert (sampled.temperature, sampled.top_p, sampled.top_k) == (0.7, 0.9, 40)
    assert sampling_from_gen_kwargs({"do_sample": True}, 10).temperature == 0.0
    # the caller's dict is not modified
    kwargs = {"until": ["a"], "max_gen_toks": 3}
    sampling_from_gen_kwargs(kwargs, 10)
    assert kwargs == {"until": ["a"], "max_gen_toks": 3}
