"""`specdec-eval run` with generation conditions, end to end on the tiny preset: --gen-kwargs and --repeats reach the
engine, the samples, the summary and the run key; the accuracy gate reads NO-GATE against a reference stated under
other conditions unless --accept-condition-mismatch; bad condition options are one line, exit status 2."""

from __future__ import annotations

import json
import textwrap

import pytest
from specdec_eval.results import store

from ..cli_helpers import run_cli
from .test_run_cli import FAST, SHARED_DATA, needs_shared_data, reference_dir  # noqa: F401  (a fixture)

SAMPLED = ("--gen-kwargs", "temperature=0.7,top_p=0.9")


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--repeats", "3"), "copies of one answer"),  # greedy: three copies of one answer
        (("--chat-template-kwargs", '{"reasoning_effort": "medium"}'), "needs --apply-chat-template"),
        (("--gen-kwargs", "temperature=-1"), "--gen-kwargs"),
        (("--gen-kwargs", "colour=red"), "--gen-kwargs"),
        (("--chat-template-kwargs", "[1]"), "--chat-template-kwargs"),
    ],
)
def test_bad_conditions_are_one_line_before_anything_runs(capsys, tmp_path, args, words):
    code, out, err = run_cli(capsys, "run", "--tasks", "gsm8k_smoke", *FAST, "--out", str(tmp_path / "runs"), *args)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], err
    assert not (tmp_path / "runs").exists() or not store.list_runs(tmp_path / "runs")  # nothing half written


@pytest.mark.slow
def test_repeats_sample_each_document_with_its_own_seed_and_record_them(capsys, tmp_path):
    runs = tmp_path / "runs"
    code, out, err = run_cli(
        capsys,
        "run",
        "--tasks",
        "gsm8k_smoke",
        "--limit",
        "3",
        "--max-output-len",
        "8",
        *SAMPLED,
        "--repeats",
        "2",
        "--json",
        *FAST,
        "--out",
        str(runs),
    )
    assert code == 0, err
    task = json.loads(out)["tasks"]["gsm8k_smoke"]
    assert task["num_samples"] == 6 and task["clustered"]["n_docs"] == 3 and task["clustered"]["n_samples"] == 6
    conditions = task["conditions"]
    assert (conditions["temperature"], conditions["top_p"], conditions["repeats"]) == (0.7, 0.9, 2)
    (run,) = store.list_runs(runs)
    samples = run.samples()
    assert sorted((s.doc_id, s.repeat) for s in samples) == [(d, r) for d in range(3) for r in range(2)]
    by_doc = {}
    for s in samples:
        by_doc.setdefault(s.doc_id, []).append(list(s.output_token_ids))
    # Two samples of a document drew from two seeds: a random model at T = 0.7 gives different tokens somewhere.
    assert any(a != b for a, b in by_doc.values())
    eval_config = run.manifest()["config"]["eval"]
    assert eval_config["gen_kwargs"] == {"temperature": 0.7, "top_p": 0.9} and eval_config["repeats"] == 2

    # The same options again: the same seeds, the same samples (resume would reuse them; a fresh run redraws them).
    code, out, err = run_cli(
        capsys,
        "run",
        "--tasks",
        "gsm8k_smoke",
        "--limit",
        "3",
        "--max-output-len",
        "8",
        *SAMPLED,
        "--repeats",
        "2",
        "--json",
        "--fresh",
        *FAST,
        "--out",
        str(runs),
    )
    assert code == 0, err
    again = [r for r in store.list_runs(runs) if r.path != run.path]
    assert len(again) == 1 and again[0].key == run.key
    pairs = {(s.doc_id, s.repeat): list(s.output_token_ids) for s in again[0].samples()}
    assert pairs == {(s.doc_id, s.repeat): list(s.output_token_ids) for s in samples}


@pytest.mark.slow
def test_a_greedy_run_never_shares_a_sampled_runs_key(capsys, tmp_path):
    runs = tmp_path / "runs"
    for extra in ((), SAMPLED):
        code, _, err = run_cli(
            capsys,
            "run",
            "--tasks",
            "gsm8k_smoke",
            "--limit",
            "1",
            "--max-output-len",
            "4",
            *extra,
            *FAST,
            "--out",
            str(runs),
        )
        assert code == 0, err
    greedy, sampled = store.list_runs(runs)
    assert greedy.key != sampled.key


@needs_shared_data
@pytest.mark.slow
def test_the_accuracy_gate_reads_no_gate_under_other_conditions(capsys, reference_dir, tmp_path):  # noqa: F811
    """A reference stated greedy, pinned to n = 1319 so that the random tiny model FAILs it: a sampled run is not
    judged against it (NO-GATE, the difference named) unless the mismatch is accepted (then FAIL)."""
    (reference_dir / "gsm8k.yaml").write_text(
        textwrap.dedent("""\
            X:
              - accuracy: 50.0
                num_samples: 1319
                temperature: 0
                command: test fixture
            """),
        encoding="utf-8",
    )
    common = (
        "--tasks",
        "gsm8k",
        "--limit",
        "2",
        "--max-output-len",
        "8",
        "--num-fewshot",
        "1",
        "--data-dir",
        str(SHARED_DATA),
        "--model-key",
        "X",
        *FAST,
    )
    code, out, err = run_cli(capsys, "run", *common, *SAMPLED, "--repeats", "2", "--out", str(tmp_path / "a"))
    assert code == 0, err
    assert "Verdict: NO-GATE" in out
    assert "conditions differ from the reference's: reference greedy, this run sampled at T=0.7, top_p 0.9" in out
    assert "--accept-condition-mismatch" in out

    code, out, err = run_cli(
        capsys, "run", *common, *SAMPLED, "--repeats", "2", "--accept-condition-mismatch", "--out", str(tmp_path / "b")
    )
    assert code == 1, err
    assert "Verdict: FAIL" in out and "judged although the conditions differ" in out
    assert "effective samples: 2 documents x 2 samples, clustered by document" in out

    code, out, err = run_cli(capsys, "run", *common, "--out", str(tmp_path / "c"))  # greedy: the conditions match
    assert code == 1, err
    assert "Verdict: FAIL" in out and "conditions match the reference's" in out
