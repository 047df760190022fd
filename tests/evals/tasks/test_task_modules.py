"""Task families as modules: nothing outside a family's own module tests a family's name, and a new task
is one module plus its references, registered through SPECDEC_EVAL_TASK_MODULES with no other edit."""

from __future__ import annotations

import ast
import json
import sys
import textwrap
from pathlib import Path

import pytest
from specdec_eval.evals.tasks import registry
from specdec_eval.results.store import list_runs

from ...cli_helpers import run_cli

ROOT = Path(registry.__file__).resolve().parents[3]  # the checkout: cli/, evals/, ... are top-level folders
PACKAGE_FOLDERS = ("cli", "evals", "launch", "results", "serve", "workers")
FAST = ("--model", "tiny", "--device-memory", "256MiB")


def family_words() -> set[str]:
    """Strings that name a family in code: each family's name and its first word ("gpqa"), and the GSM8K answer
    marker the progress line once sniffed documents for."""
    names = set(registry.FAMILIES)
    return names | {n.split("_")[0] for n in names} | {"####"}


def family_modules() -> set[Path]:
    return {Path(sys.modules[type(f).__module__].__file__).resolve() for f in registry.FAMILIES.values()}


def family_branches(source: str, words: set[str]) -> list[str]:
    """Each place in the source that compares with a family's name, keys a dict by one, matches on one, or
    compares a `.family` by equality: 'line: code'."""

    def names_family(node: ast.AST) -> bool:
        consts = [n for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
        return any(w in c.value.lower() for c in consts for w in words)

    found = []
    for node in ast.walk(ast.parse(source)):
        hit = False
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            by_value = any(isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) for op in node.ops)
            hit = any(names_family(o) for o in operands) or (
                by_value and any(isinstance(o, ast.Attribute) and o.attr == "family" for o in operands)
            )
        elif isinstance(node, ast.Dict):
            hit = any(k is not None and names_family(k) for k in node.keys)
        elif isinstance(node, ast.MatchValue):
            hit = names_family(node.value)
        if hit:
            found.append(f"{node.lineno}: {ast.get_source_segment(source, node)}")
    return found


def test_no_module_outside_a_task_module_branches_on_a_family_name():
    words, skip = family_words(), family_modules()
    assert {"gsm8k", "gpqa_diamond", "gpqa"} <= words and len(skip) >= 2
    offenders = []
    for folder in PACKAGE_FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.resolve() in skip:
                continue
            offenders += [f"{path.relative_to(ROOT)}:{hit}" for hit in family_branches(path.read_text(), words)]
    assert offenders == [], "ask the task family object instead:\n" + "\n".join(offenders)


@pytest.mark.parametrize(
    "planted",
    [
        'x = a if spec.family == "gsm8k" else b',
        "ok = spec.family != other",
        'x = "####" in answer',
        'FILTERS = {"gpqa_diamond": ("strict-match",)}',
        'if task.name in ("gpqa_diamond_smoke", "x"):\n    pass',
        'match name:\n    case "gsm8k":\n        pass',
    ],
)
def test_the_scan_finds_a_planted_family_branch(planted):
    assert family_branches(planted, family_words()), planted


def test_the_scan_leaves_task_names_and_object_identity_alone():
    """Picking a task by name (selftest runs GSM8K) and comparing family objects are not family branches."""
    code = 'tasks = [TASKS["gsm8k"]]\nsame = s.family is not family\nhelp = "GSM8K 5 shots"'
    assert family_branches(code, family_words()) == []


# --- a new task: one module and its files, nothing else --------------------------------------------------------

ARITH_MODULE = '''
"""A tiny arithmetic task: "What is a+b?" -> the sum, scored by lm-eval's exact match on the whole answer."""

from pathlib import Path

import yaml

from specdec_eval.evals.tasks.data import DataSource
from specdec_eval.evals.tasks.data_check import check_table
from specdec_eval.evals.tasks.family import TaskFamily, TaskSpec

HERE = Path(__file__).parent


class Arithmetic(TaskFamily):
    name = "arith"
    filters = ("none",)  # no filter_list: lm-eval scores the whole answer under the filter "none"
    max_output_len = 6
    reference_dir = HERE  # arith.yaml beside this module

    def source(self, spec, data_dir):
        path = str(HERE / "arith.jsonl")
        rows = check_table(path, "json", ("question", "answer"))
        return DataSource(f"local:{path}", "json", {"test": path}, num_rows={"test": rows})

    def task_yaml(self, spec, source, stock, seed):
        return yaml.safe_dump({
            "task": spec.lm_eval_name,
            "dataset_path": source.builder,
            "dataset_kwargs": {"data_files": source.files},
            "test_split": "test",
            "output_type": "generate_until",
            "doc_to_text": "Question: {{question}}\\nAnswer:",
            "doc_to_target": "{{answer}}",
            "generation_kwargs": {"until": ["\\n"], "do_sample": False},
            "metric_list": [{"metric": "exact_match", "aggregation": "mean", "higher_is_better": True}],
            "metadata": {"version": 1.0},
        })

    def live_correct(self, output, doc):
        return output.strip() == str(doc["answer"])


FAMILY = Arithmetic()
TASKS = (TaskSpec("arith", FAMILY),)
'''
PROBLEMS = [("What is 3+4?", "7"), ("What is 2+2?", "4"), ("What is 10+5?", "15")]


@pytest.fixture
def clean_registry():
    """The demo's registration stays in the test: the registry is as it was afterwards."""
    saved = dict(registry.TASKS), dict(registry.FAMILIES), set(registry._LOADED)
    yield
    for live, old in zip((registry.TASKS, registry.FAMILIES, registry._LOADED), saved, strict=True):
        live.clear()
        live.update(old)
    sys.modules.pop("specdec_eval_task_arith", None)


def test_a_new_task_is_one_module_plus_its_references(capsys, tmp_path, monkeypatch, clean_registry):
    task_dir = tmp_path / "arith_task"
    task_dir.mkdir()
    (task_dir / "arith.py").write_text(ARITH_MODULE)
    (task_dir / "arith.jsonl").write_text("".join(json.dumps({"question": q, "answer": a}) + "\n" for q, a in PROBLEMS))
    (task_dir / "arith.yaml").write_text(
        textwrap.dedent("""\
        tiny-arith:
          - accuracy: 50.0
            source: written by the test (the plain baseline's entry)
          - accuracy: 50.0
            spec_dec_algo: Eagle3
            source: written by the test
    """)
    )
    monkeypatch.setenv(registry.TASK_MODULES_ENV, str(task_dir / "arith.py"))

    code, out, err = run_cli(
        capsys,
        "run",
        "--tasks",
        "arith",
        "--spec",
        "eagle3",
        "--model-key",
        "tiny-arith",
        "--json",
        *FAST,
        "--out",
        str(tmp_path / "runs"),
    )
    assert code == 0, err
    task = json.loads(out)["tasks"]["arith"]
    assert task["num_samples"] == 3 and task["num_failed_requests"] == 0
    assert task["reference"] == 50.0  # found in the module's own references file
    assert task["verdict"] in ("PASS", "FAIL", "NO-GATE") and task["threshold"] is not None
    assert set(task["filter_scores"]) == {"none"} and 0.0 <= task["score"] <= 100.0
    assert task["lossless"]["verdict"] == "PASS"  # against its plain baseline, sample by sample

    (run,) = [r for r in list_runs(tmp_path / "runs") if r.summary()["spec"] == "eagle3"]  # its baseline beside it
    samples = run.samples()
    assert [(s.task, s.doc_id, s.target) for s in samples] == [("arith", i, a) for i, (_, a) in enumerate(PROBLEMS)]
    for s in samples:
        assert isinstance(s.output, str) and s.output_token_ids
        assert s.finish_reason in ("stop", "eos", "length")
        assert s.extracted["none"] == s.output  # no filter: lm-eval scores the whole answer
        assert s.correct["none"] == (s.output == s.target)
    assert 100.0 * sum(s.correct["none"] for s in samples) / 3 == pytest.approx(task["score"])


def test_a_task_module_that_cannot_be_imported_is_one_user_error(capsys, tmp_path, monkeypatch, clean_registry):
    monkeypatch.setenv(registry.TASK_MODULES_ENV, str(tmp_path / "missing.py"))
    code, out, err = run_cli(capsys, "run", "--tasks", "gsm8k_smoke", *FAST, "--out", str(tmp_path / "runs"))
    assert code == 2
    assert err.strip().splitlines() == [
        f"specdec-eval: error: {registry.TASK_MODULES_ENV}: cannot import task module "
        f"'{tmp_path / 'missing.py'}' (no such file {tmp_path / 'missing.py'})"
    ]


def test_a_module_cannot_take_a_registered_task_name(clean_registry):
    from types import ModuleType

    from specdec_eval.evals.tasks.gsm8k import Gsm8k

    from specdec_eval.errors import UserError

    class Impostor(Gsm8k):
        name = "impostor"

    module = ModuleType("impostor")
    module.FAMILY = Impostor()
    module.TASKS = (registry.TaskSpec("gsm8k", module.FAMILY),)
    with pytest.raises(UserError, match="task gsm8k taken"):
        registry.register(module)
    assert registry.TASKS["gsm8k"].family is registry.FAMILIES["gsm8k"]
