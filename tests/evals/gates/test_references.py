"""Reference lookup: TensorRT-LLM's first-match rule over YAML entries, our wildcard keys, overrides, errors."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import yaml
from specdec_eval.evals.conditions.reference import CONDITION_KEYS
from specdec_eval.evals.gates import references
from specdec_eval.evals.gates.references import lookup

from specdec_eval.errors import UserError


@pytest.fixture(autouse=True)
def _collect_engines():
    """Overrides conftest's per-test gc.collect: no engines are built here."""
    yield


MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def selection(**over):
    """The selection dict exactly as evals.runner.selection_for builds it, for a default GSM8K run."""
    sel = {
        "dtype": "auto",
        "quant_algo": None,
        "kv_cache_quant_algo": None,
        "spec_dec_algo": None,
        "extra_acc_spec": None,
        "kv_cache": "v1",
        "num_fewshot": 5,
        "max_output_len": 256,
    }
    sel.update(over)
    return sel


def write(folder: Path, task: str, text: str) -> Path:
    path = folder / f"{task}.yaml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def test_selection_helper_matches_the_runner():
    """Keep this file's selection in step with what the runner really passes."""
    from types import SimpleNamespace

    from specdec_eval.evals.pipeline.evaluation import selection_for
    from specdec_eval.evals.run_types import EvalOptions
    from specdec_eval.evals.tasks.registry import TASKS
    from specdec_eval.workers.config import EngineConfig
    from specdec_eval.workers.engine.engine import identity_of

    engine = SimpleNamespace(identity=identity_of(EngineConfig(model="tiny")))
    spec = TASKS["gsm8k"]
    assert selection_for(engine, spec, EvalOptions(tasks=[spec])) == selection()


def test_plain_entry_matches_a_default_run(tmp_path):
    """An entry naming only `accuracy` is the plain run: any KV-cache version, the task's own shots and output
    length. (The runner always passes max_output_len, so it must be a wildcard when absent.)"""
    write(tmp_path, "gsm8k", f"{MODEL}:\n  - accuracy: 74.20\n")
    for kv in ("v1", "v2"):
        ref = lookup("gsm8k", MODEL, selection(kv_cache=kv), reference_dir=tmp_path)
        assert ref.accuracy == 74.20 and ref.model_key == MODEL and ref.task == "gsm8k"


def test_first_match_in_yaml_order_wins(tmp_path):
    write(
        tmp_path,
        "gsm8k",
        f"""\
        {MODEL}:
          - accuracy: 70.0
            spec_dec_algo: Eagle3
          - accuracy: 74.2
          - accuracy: 99.0
          - accuracy: 73.0
            spec_dec_algo: Eagle3
        """,
    )
    assert lookup("gsm8k", MODEL, selection(), reference_dir=tmp_path).accuracy == 74.2
    assert lookup("gsm8k", MODEL, selection(spec_dec_algo="Eagle3"), reference_dir=tmp_path).accuracy == 70.0


def test_entry_without_a_key_matches_only_the_default(tmp_path):
    write(tmp_path, "gsm8k", f"{MODEL}:\n  - accuracy: 74.2\n")
    for key, value in [
        ("spec_dec_algo", "Eagle3"),  # an Eagle3 run does not match a plain entry
        ("dtype", "bfloat16"),
        ("quant_algo", "FP8"),
        ("kv_cache_quant_algo", "FP8"),
        ("extra_acc_spec", "chat_template"),
    ]:
        with pytest.raises(UserError, match=f"{key}={value}"):
            lookup("gsm8k", MODEL, selection(**{key: value}), reference_dir=tmp_path)


def test_explicit_default_values_match(tmp_path):
    write(tmp_path, "gsm8k", f"{MODEL}:\n  - accuracy: 74.2\n    dtype: auto\n    spec_dec_algo: null\n")
    assert lookup("gsm8k", MODEL, selection(), reference_dir=tmp_path).accuracy == 74.2
    with pytest.raises(UserError):
        lookup("gsm8k", MODEL, selection(dtype="float32"), reference_dir=tmp_path)


@pytest.mark.parametrize(
    "key, present, other", [("kv_cache", "v2", "v1"), ("num_fewshot", 3, 8), ("max_output_len", 512, 256)]
)
def test_wildcard_keys_must_match_when_present(tmp_path, key, present, other):
    write(
        tmp_path,
        "gsm8k",
        f"""\
        {MODEL}:
          - accuracy: 60.0
            {key}: {present}
          - accuracy: 74.2
        """,
    )
    assert lookup("gsm8k", MODEL, selection(**{key: present}), reference_dir=tmp_path).accuracy == 60.0
    # present in the entry but different: that entry is skipped; the next one (key absent) is a wildcard
    assert lookup("gsm8k", MODEL, selection(**{key: other}), reference_dir=tmp_path).accuracy == 74.2


def test_eagle3_entry_with_kv_cache(tmp_path):
    write(
        tmp_path,
        "gsm8k",
        f"""\
        {MODEL}:
          - accuracy: 74.2
          - accuracy: 74.3
            spec_dec_algo: Eagle3
            kv_cache: v2
        """,
    )
    sel = selection(spec_dec_algo="Eagle3", kv_cache="v2")
    assert lookup("gsm8k", MODEL, sel, reference_dir=tmp_path).accuracy == 74.3
    with pytest.raises(UserError, match="spec_dec_algo=Eagle3"):
        lookup("gsm8k", MODEL, selection(spec_dec_algo="Eagle3", kv_cache="v1"), reference_dir=tmp_path)


def test_overrides_reach_the_hypothesis_test(tmp_path):
    write(
        tmp_path,
        "gpqa_diamond",
        f"""\
        {MODEL}:
          - accuracy: 65.0
            alpha: 0.1
            beta: 0.3
            sigma: 40.0
            num_samples: 500
            floor: 30.0
        """,
    )
    ref = lookup("gpqa_diamond", MODEL, selection(), reference_dir=tmp_path)
    test = ref.hypothesis_test(198, floor=25.0)
    assert (test.ref_accuracy, test.alpha, test.beta, test.sigma) == (65.0, 0.1, 0.3, 40.0)
    assert test.num_samples == 500  # the entry pins n
    assert test.floor == 30.0  # the entry's floor beats the task's


def test_without_overrides_n_is_what_was_evaluated(tmp_path):
    write(tmp_path, "gpqa_diamond", f"{MODEL}:\n  - accuracy: 65.0\n")
    test = lookup("gpqa_diamond", MODEL, selection(), reference_dir=tmp_path).hypothesis_test(198, floor=25.0)
    assert (test.num_samples, test.floor, test.alpha, test.beta, test.sigma) == (198, 25.0, 0.05, 0.2, 50.0)
    assert round(test.threshold, 3) == 56.734


def test_higher_is_better_override(tmp_path):
    write(tmp_path, "gsm8k", f"{MODEL}:\n  - accuracy: 10.0\n    higher_is_better: false\n")
    test = lookup("gsm8k", MODEL, selection(), reference_dir=tmp_path).hypothesis_test(300)
    assert not test.higher_is_better and round(test.threshold, 3) == 16.715


def test_unknown_model(tmp_path):
    write(tmp_path, "gsm8k", f"{MODEL}:\n  - accuracy: 74.2\n")
    with pytest.raises(UserError) as e:
        lookup("gsm8k", "someone/Unknown-Model", selection(), reference_dir=tmp_path)
    message = str(e.value)
    assert "someone/Unknown-Model" in message and "--no-reference" in message
    assert "\n" not in message


def test_missing_reference_file_is_an_unknown_model(tmp_path):
    with pytest.raises(UserError, match="--no-reference") as e:
        lookup("gsm8k", MODEL, selection(), reference_dir=tmp_path)
    assert MODEL in str(e.value)


def test_no_matching_entry_lists_the_wanted_keys(tmp_path):
    write(tmp_path, "gsm8k", f"{MODEL}:\n  - accuracy: 74.2\n    quant_algo: FP8\n")
    sel = selection(spec_dec_algo="Eagle3", kv_cache="v2")
    with pytest.raises(UserError) as e:
        lookup("gsm8k", MODEL, sel, reference_dir=tmp_path)
    message = str(e.value)
    for key, value in sel.items():
        assert f"{key}={value}" in message
    assert MODEL in message and "--no-reference" in message


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("model: [accuracy: 1\n  - : :\n", "not valid YAML"),
        ("- just\n- a list\n", "expected 'model key: [entries]'"),
        (f"{MODEL}: 74.2\n", "expected 'model key: [entries]'"),
        (f"{MODEL}:\n  - dtype: auto\n", "needs a numeric 'accuracy'"),
        (f"{MODEL}:\n  - accuracy: high\n", "needs a numeric 'accuracy'"),
    ],
    ids=["bad-yaml", "top-level-list", "entries-not-a-list", "no-accuracy", "text-accuracy"],
)
def test_bad_files_name_the_file(tmp_path, text, fragment):
    path = write(tmp_path, "gsm8k", text)
    with pytest.raises(UserError) as e:
        lookup("gsm8k", MODEL, selection(), reference_dir=tmp_path)
    assert str(path) in str(e.value) and fragment in str(e.value)


def test_empty_file_has_no_models(tmp_path):
    write(tmp_path, "gsm8k", "")
    assert references.load_references("gsm8k", tmp_path) == {}
    with pytest.raises(UserError, match="--no-reference"):
        lookup("gsm8k", MODEL, selection(), reference_dir=tmp_path)


# --- the shipped reference files --------------------------------------------------------------------------

# acceptance_length.yaml has its own layout (test id -> ref_al, min_al): tests/evals/gates/test_acceptance.py
SHIPPED = sorted(p for p in references.REFERENCE_DIR.glob("*.yaml") if p.name != "acceptance_length.yaml")


@pytest.mark.skipif(not SHIPPED, reason="no reference YAMLs shipped yet in evals/references/")
@pytest.mark.parametrize("path", SHIPPED, ids=[p.name for p in SHIPPED])
def test_shipped_reference_files(path):
    data = references.load_references(path.stem)  # validates the layout; raises UserError on a bad file
    assert data, f"{path.name} holds no model"
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert raw == data
    known = set(references.SELECTION_DEFAULTS) | set(references.WILDCARD_KEYS) | set(references.OVERRIDES)
    known |= set(references.SCORING_KEYS) | set(CONDITION_KEYS)
    known |= {"accuracy", "command", "source", "notes", "note"}
    for model, entries in data.items():
        assert entries, f"{path.name}: {model} has no entries"
        for i, entry in enumerate(entries):
            where = f"{path.name}: {model} entry {i}"
            assert isinstance(entry["accuracy"], (int, float)) and not isinstance(entry["accuracy"], bool), where
            assert 0 <= entry["accuracy"] <= 100, where
            assert entry.get("command") or entry.get("source"), f"{where} records neither command nor source"
            unknown = set(entry) - known
            assert not unknown, f"{where}: unknown keys {sorted(unknown)}"


def test_gpt_oss_references_name_their_conditions():
    """GPT-OSS-120B's TensorRT-LLM figures hold only as TestGPTOSS runs them: GSM8K with 8192 output tokens under
    the chat template, scored on flexible-extract; a default 256-token run finds no reference."""
    gpt_oss = "GPT-OSS/120B-MXFP4"
    with pytest.raises(UserError, match="matches"):
        lookup("gsm8k", gpt_oss, selection(spec_dec_algo="Eagle3"))
    ref = lookup("gsm8k", gpt_oss, selection(spec_dec_algo="Eagle3", max_output_len=8192))
    assert ref.accuracy == 90.3 and ref.score_filter == "flexible-extract"
    assert round(ref.hypothesis_test(1319).threshold, 3) == 87.097
    with pytest.raises(UserError):
        lookup("gsm8k", gpt_oss, selection(max_output_len=8192, apply_chat_template=False))
    gpqa = selection(num_fewshot=0, max_output_len=32768, apply_chat_template=True)
    assert lookup("gpqa_diamond", gpt_oss, gpqa).accuracy == 65.0
    eagle3_mxfp8 = dict(gpqa, spec_dec_algo="Eagle3", quant_algo="W4A8_MXFP4_MXFP8")
    assert lookup("gpqa_diamond", gpt_oss, eagle3_mxfp8).accuracy == 64.0
    assert lookup("gpqa_diamond", gpt_oss, dict(eagle3_mxfp8, spec_dec_algo="Eagle")).accuracy == 65.0
    assert lookup("gpqa_diamond", gpt_oss, gpqa).score_filter is None  # the mean of the filters, as ours
