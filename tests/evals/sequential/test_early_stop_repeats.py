"""`run --early-stop` with several samples per document (`--repeats`): a look counts a document only once all its
samples are scored and judges the mean of per-document means; the adapter schedules a document's samples together;
the lossless stop pairs each sample with the baseline's sample of the same (task, document, repeat); progress records
carry the repeat. End to end on the tiny preset: an accuracy stop at a look counted in documents, lossless intact."""

from __future__ import annotations

import functools
import json
import textwrap
from dataclasses import dataclass, replace
from typing import Any

import pytest
from specdec_eval.evals.gates import references
from specdec_eval.evals.pipeline.lm_adapter import LMSession, SequentialStop, SpecDecLM
from specdec_eval.evals.pipeline.one_run import tokens_by_sample
from specdec_eval.evals.pipeline.preflight import check_generation_conditions
from specdec_eval.evals.run_types import EvalOptions
from specdec_eval.evals.sequential import early_stop
from specdec_eval.evals.sequential.ab_channel import acknowledge
from specdec_eval.evals.sequential.accuracy import AccuracySequentialDesign
from specdec_eval.evals.sequential.early_stop import EarlyStop
from specdec_eval.evals.tasks.registry import parse_tasks
from specdec_eval.evals.tasks.subsets import plan_subset
from specdec_eval.results import store
from specdec_eval.results.sample_record import SampleRecord

from specdec_eval.errors import UserError

from ...cli.test_run_cli import SHARED_DATA, needs_shared_data, run_cli
from ...engine_helpers import FakeEngine


def _stopper(n_docs: int = 8, repeats: int = 2, batch: int = 2, ref: float = 60.0) -> EarlyStop:
    design = AccuracySequentialDesign.for_batches(ref, n_docs, batch, repeats=repeats)
    stop = EarlyStop(lambda task, n: design, batch=batch)
    stop.start("t", n_docs, repeats)
    return stop


def test_a_look_waits_for_every_sample_of_a_document():
    """Batches of 2 documents x 2 samples: with document 1's second sample missing, one document is done and there
    is no look; once it comes, the look at 2 documents judges the mean of the two documents' means."""
    stop = _stopper()
    for position, repeat, score in [(0, 0, 100.0), (0, 1, 0.0), (1, 0, 100.0)]:
        stop.observe("t", position, score, None, None, f"d{position}", repeat)
    stop.after_batch("t")
    assert stop.tasks["t"].done == 1 and stop.tasks["t"].looks == []
    stop.observe("t", 1, 100.0, None, None, "d1", 1)
    stop.after_batch("t")
    (look,) = stop.tasks["t"].looks
    assert (look["n"], look["score"]) == (2, 75.0)  # (50 + 100) / 2; sample by sample it would be 3 of 4 too...
    assert "at 2/8 documents (avg@2)" in look["reason"]


def test_the_look_score_is_the_mean_of_document_means_not_of_samples():
    """A document's samples weigh 1/R each within it, however many there are: a document scored [100, 100] and one
    scored [0, 0] average 50, and the score does not depend on which sample arrived last."""
    stop = _stopper(repeats=2)
    for position, scores in enumerate([[100.0, 100.0], [0.0, 100.0]]):
        for repeat, score in reversed(list(enumerate(scores))):  # repeat 1 first: arrival order must not matter
            stop.observe("t", position, score, None, None, position, repeat)
    stop.after_batch("t")
    assert stop.tasks["t"].looks[-1]["score"] == 75.0


def test_a_hopeless_task_stops_at_a_look_counted_in_documents():
    stop = _stopper(n_docs=40, repeats=3, batch=8)
    for position in range(16):
        for repeat in range(3):
            stop.observe("t", position, 0.0, None, None, position, repeat)
        if (position + 1) % 8 == 0:
            stop.after_batch("t")
            if not stop.is_open("t"):
                break
    record = stop.record("t")
    assert record["gate"] == "accuracy" and record["n"] in (8, 16) and record["of"] == 40
    assert "documents (avg@3)" in record["reason"]
    assert "per-document means of 3 samples" in stop.design_note("t")


def test_the_lossless_stop_names_the_divergent_sample():
    stop = _stopper()
    stop.observe("t", 0, 0.0, None, None, 7, 0)
    stop.observe("t", 0, 0.0, None, 2, 7, 1)
    assert not stop.is_open("t")
    assert stop.tasks["t"].stopped["repeat"] == 1 and stop.tasks["t"].stopped["reason"].startswith("doc 7 sample 1 ")


def test_the_design_must_count_the_tasks_documents_and_samples():
    design = AccuracySequentialDesign.for_batches(60.0, 8, 2)  # one sample per unit
    stop = EarlyStop(lambda task, n: design, batch=2)
    with pytest.raises(ValueError, match="8 units of 1 samples"):
        stop.start("t", 8, 2)
    stop = _stopper()
    with pytest.raises(ValueError, match="repeat 2"):
        stop.observe("t", 0, 0.0, None, None, 0, 2)


def test_progress_records_carry_the_repeat(tmp_path):
    acknowledge(tmp_path / "side.stop", 2)  # a watcher that read both records: the side does not wait for one
    stop = EarlyStop(lambda task, n: None, batch=2, exact=False, stop_file=str(tmp_path / "side.stop"))
    stop.start("gsm8k", 5, 2)
    stop.observe("gsm8k", 0, 100.0, {"num_cycles": 12, "num_accepted_drafts": 7}, None, "d0", 1)
    stop.observe("gsm8k", 0, 0.0, None, None, "d0", 0)
    stop.after_batch("gsm8k")
    lines = [json.loads(line) for line in (tmp_path / "side.stop.progress.jsonl").read_text().splitlines()]
    assert lines == [
        {"task": "gsm8k", "position": 0, "repeat": 0, "repeats": 2, "score": 0.0, "of": 5},
        {"task": "gsm8k", "position": 0, "repeat": 1, "repeats": 2, "score": 100.0, "of": 5, "acceptance": [12, 7]},
    ]


def test_recorded_baseline_tokens_are_looked_up_by_document_and_repeat():
    base = SampleRecord(
        task="gsm8k",
        doc_id=3,
        doc_hash=None,
        prompt_hash=None,
        target="",
        output="",
        output_hash=None,
        num_output_tokens=2,
        output_token_ids=[1, 2],
        extracted={},
        correct={},
    )
    lookup = tokens_by_sample([base, replace(base, repeat=1, output_token_ids=[1, 9])], {"gsm8k_lm": "gsm8k"})
    assert lookup("gsm8k_lm", 3, 0) == [1, 2] and lookup("gsm8k_lm", 3, 1) == [1, 9]
    assert lookup("gsm8k_lm", 3, 2) is None and lookup("gsm8k_lm", 4, 0) is None


@dataclass
class _Request:
    """What the adapter reads of an lm-eval Instance."""

    args: tuple[str, dict[str, Any]]
    metadata: tuple[str, int, Any]
    doc: Any = None


class _BatchesEngine(FakeEngine):
    """The fake engine, keeping each generate call's prompts (one call per sequential batch)."""

    def __init__(self) -> None:
        super().__init__(answer=lambda prompt: f"answer to {prompt}")
        self.batches: list[list[str]] = []

    def generate(self, prompts, sampling=None, progress=None, sink=None):
        self.batches.append(list(prompts))
        return super().generate(prompts, sampling, progress, sink)


def test_the_adapter_schedules_whole_documents_and_pairs_samples_by_repeat(monkeypatch):
    """6 documents x 2 samples (lm-eval sends each request twice), batches of 2 documents: each engine call has both
    samples of 2 documents; the recorded baseline differs from the run only in the 2nd sample of the 3rd document of
    the order, so the lossless stop fires there (after the 2nd batch), naming that sample, and the remaining documents
    are skipped with all their samples."""
    monkeypatch.setattr(early_stop, "sample_score", lambda *args, **kwargs: 0.0)
    engine = _BatchesEngine()
    plan = plan_subset("t", 6, None, "random", 0)
    gen_kwargs = {"do_sample": True, "temperature": 1.0, "until": []}
    requests = [r for d in range(6) for r in [_Request((f"q{d}", gen_kwargs), ("t", d, None))] * 2]
    third = plan.order[2]
    run_tokens = {d: engine.encode(f"answer to q{d}") for d in range(6)}

    def baseline(task: str, doc_id: int, repeat: int) -> list[int]:
        return run_tokens[doc_id] + ([0] if (doc_id, repeat) == (third, 1) else [])

    stopper = EarlyStop(lambda task, n: None, batch=2, exact=True)
    session = LMSession(
        tasks={"t": None},
        plans={"t": plan},
        sample_seed_base=0,
        sequential=SequentialStop(stopper, {"t": None}, baseline),
    )
    outputs = SpecDecLM(engine, session).outputs_for(requests)
    first_two = [f"q{d}" for d in plan.order[:2] for _ in range(2)]
    assert engine.batches[0] == first_two and len(engine.batches) == 2 and len(engine.batches[1]) == 4
    stopped = stopper.tasks["t"].stopped
    assert stopped["gate"] == "lossless" and (stopped["doc_id"], stopped["repeat"]) == (third, 1)
    skipped = {r.metadata[1] for r, out in zip(requests, outputs, strict=True) if out.finish_reason == "skipped"}
    assert skipped == set(plan.order[4:])
    assert stopper.record("t")["n"] == 4  # documents done when the look saw the stop


TINY = ("--model", "tiny", "--device-memory", "256MiB", "--data-dir", str(SHARED_DATA), "--num-fewshot", "1")


@needs_shared_data
@pytest.mark.slow
def test_early_stop_with_repeats_end_to_end(capsys, tmp_path, monkeypatch):
    """The tiny preset scores ~0 against a reference of 60 stated at T = 1.0: at --repeats 2 the accuracy design
    FAILs at an early look counted in documents, every evaluated document with both of its samples. The plain
    baseline is a separate run: each spec-dec sample meets the baseline's sample of the same repeat (the same seed,
    our coupled sampler), so the lossless gate finds no divergence and never stops the run."""
    from specdec_eval.evals.pipeline import evaluation as runner

    folder = tmp_path / "refs"
    folder.mkdir()
    (folder / "gsm8k.yaml").write_text(
        textwrap.dedent("""\
        X:
          - accuracy: 60.0
            temperature: 1.0
            command: test fixture
          - accuracy: 60.0
            spec_dec_algo: Eagle3
            temperature: 1.0
            command: test fixture
        """)
    )
    monkeypatch.setattr(runner, "lookup", functools.partial(references.lookup, reference_dir=folder))
    out = tmp_path / "runs"
    code, printed, err = run_cli(
        capsys,
        "run",
        "--tasks",
        "gsm8k",
        "--limit",
        "12",
        "--early-stop",
        "--early-stop-batch",
        "2",
        "--gen-kwargs",
        "temperature=1.0",
        "--repeats",
        "2",
        "--max-output-len",
        "8",
        "--spec",
        "eagle3",
        "--baseline",
        "separate",
        "--model-key",
        "X",
        "--out",
        str(out),
        *TINY,
    )
    assert code == 1, err
    (run,) = [r for r in store.list_runs(out) if r.manifest()["config"]["engine"]["spec"] is not None]
    task = json.loads((run.path / "summary.json").read_text())["tasks"]["gsm8k"]
    stopped = task["stopped"]
    assert stopped["gate"] == "accuracy" and stopped["of"] == 12 and stopped["n"] < 12, stopped
    assert task["num_samples"] == 2 * stopped["n"]
    assert task["lossless"]["verdict"] == "PASS" and task["lossless"]["divergent"] == 0, task["lossless"]
    assert f"sequential verdict at n={stopped['n']}: FAIL" in printed and "documents (avg@2)" in printed
    assert "sequential design: per-document means of 2 samples (avg@2)" in printed
    pairs = sorted((s.doc_id, s.repeat) for s in run.samples())
    assert len(pairs) == 2 * stopped["n"]
    assert pairs == sorted((d, r) for d in {d for d, _ in pairs} for r in range(2))  # whole documents only


def test_repeats_combine_with_the_sequential_runs_and_greedy_still_refuses():
    sampled = EvalOptions(parse_tasks("gsm8k"), gen_kwargs="temperature=1.0", repeats=2)
    for options in (replace(sampled, early_stop=True), replace(sampled, stop_file="side.stop")):
        check_generation_conditions(options)  # no refusal: the sequential designs count documents
    with pytest.raises(UserError, match="copies of one answer"):
        check_generation_conditions(replace(sampled, gen_kwargs=None, early_stop=True))


def test_no_accuracy_design_against_a_reference_measured_under_other_conditions():
    """A sampled run (every --repeats run) against a reference stated greedy: the gate reads NO-GATE, so the
    controller gets no design and never stops the task on accuracy; stated at the run's temperature, it does."""
    from specdec_eval.evals.gates.references import Reference
    from specdec_eval.evals.pipeline.evaluation import StopInputs, _stopper

    options = EvalOptions(parse_tasks("gsm8k"), gen_kwargs="temperature=1.0", repeats=2, early_stop=True)
    name = options.tasks[0].name
    for temperature, has_design in ((0.0, False), (1.0, True)):
        ref = Reference("gsm8k", "X", 60.0, {"accuracy": 60.0, "temperature": temperature})
        stopper = _stopper(FakeEngine(), options, {name: ref}, StopInputs())
        assert (stopper.design_for(options.tasks[0].lm_eval_name, 40) is not None) == has_design
