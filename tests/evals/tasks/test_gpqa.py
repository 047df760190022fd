"""GPQA-Diamond documents: seeded choice order, the target letter matches the rendered prompt, text cleaning, and
the data hygiene rules.

Every GPQA-format row written here is INVENTED (synthetic questions about made-up tokens). The real dataset is
only read in memory from the password-protected zip, and the tests that use it compare counts and hashes only:
no assertion message, parameter id or failure report may ever contain real question or answer text.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import zipfile
from pathlib import Path

import lm_eval.tasks
import pytest
import yaml
from lm_eval.utils import apply_template
from specdec_eval.evals.tasks import gpqa
from specdec_eval.evals.tasks.data import DataSource
from specdec_eval.evals.tasks.registry import TASKS, source_for, write_task_yamls

from specdec_eval.errors import UserError

from ...gpqa_helpers import COLUMNS, REAL_ZIP, ROWS, synthetic_row, write_csv


@pytest.fixture(autouse=True)
def _collect_engines():
    """Overrides conftest's per-test gc.collect: no engines are built here."""
    yield


REPO = Path(__file__).resolve().parents[3]
STOCK_COT_YAML = Path(lm_eval.tasks.__file__).parent / "gpqa" / "cot_zeroshot" / "_gpqa_cot_zeroshot_yaml"
COT_TEMPLATE = (
    "What is the correct answer to this question:{{Question}}\nChoices:\n(A) {{choice1}}\n(B) {{choice2}}\n"
    "(C) {{choice3}}\n(D) {{choice4}}\nLet's think step by step: "
)


def _sha(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


# --- choice order -----------------------------------------------------------------------------------------


def test_choice_order_is_a_permutation_and_stable():
    for row in ROWS:
        rid = row["Record ID"]
        for seed in (0, 1, 7):
            order = gpqa.choice_order(rid, seed)
            assert sorted(order) == [0, 1, 2, 3]
            assert gpqa.choice_order(rid, seed) == order


def test_choice_order_depends_on_seed_and_record():
    ids = [r["Record ID"] for r in ROWS]
    differ = sum(gpqa.choice_order(rid, 0) != gpqa.choice_order(rid, 1) for rid in ids)
    assert differ >= 40  # 23/24 expected to differ
    # all 24 orders occur over many records, and the correct answer lands on every letter
    orders = {tuple(gpqa.choice_order(f"rec-{i}", 0)) for i in range(500)}
    assert len(orders) == 24
    positions = [gpqa.choice_order(f"rec-{i}", 0).index(3) for i in range(400)]
    assert all(60 <= positions.count(k) <= 140 for k in range(4))


def test_choice_order_ignores_global_random_state():
    import random

    random.seed(1)
    first = gpqa.choice_order("synthetic-007", 0)
    random.seed(2)
    random.random()
    assert gpqa.choice_order("synthetic-007", 0) == first


# --- make_doc ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1])
def test_make_doc_answer_letter_indexes_the_correct_answer(seed):
    for i, row in enumerate(ROWS):
        doc = gpqa.make_doc(row, i, seed)
        letter = doc["answer"]
        assert letter in ("(A)", "(B)", "(C)", "(D)")
        k = gpqa.LETTERS.index(letter[1])
        assert doc["choices"][k] == row["Correct Answer"]
        assert sorted(doc["choices"]) == sorted(
            row[c] for c in ("Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3")
        )
        assert [doc[f"choice{j}"] for j in range(1, 5)] == doc["choices"]
        assert doc["Question"] == row["Question"] and doc["Record ID"] == row["Record ID"]
        order = gpqa.choice_order(row["Record ID"], seed)
        assert letter == f"({gpqa.LETTERS[order.index(3)]})"


def test_make_doc_duplicate_answer_texts_still_point_at_the_correct_slot():
    """lm-eval's stock process_docs finds the answer with choices.index(text); ours tracks the position."""
    row = synthetic_row(3)
    row["Incorrect Answer 2"] = row["Correct Answer"]
    doc = gpqa.make_doc(row, 0, 0)
    k = gpqa.LETTERS.index(doc["answer"][1])
    assert gpqa.choice_order(row["Record ID"], 0)[k] == 3


def test_make_doc_without_record_id_uses_the_row_index():
    row = synthetic_row(5, record_id="")
    assert gpqa.make_doc(row, 17, 0)["Record ID"] == "row-17"
    assert gpqa.make_doc(row, 17, 0)["answer"] == gpqa.make_doc(row, 17, 0)["answer"]


def test_make_doc_cleans_text():
    row = synthetic_row(1)
    row["Question"] = "  Zorbic  question [title] about tones  "
    row["Correct Answer"] = " 46 "
    doc = gpqa.make_doc(row, 0, 0)
    assert doc["Question"] == "Zorbic question. about tones"
    assert "46" in doc["choices"]


# --- clean() ----------------------------------------------------------------------------------------------


CLEAN_CASES = [
    (None, " "),
    ("", ""),
    ("  padded  ", "padded"),
    ("Intro [title] Rest", "Intro. Rest"),
    ("a  b", "a b"),
    ("a    b", "a  b"),  # one pass of non-overlapping pairs, as lm-eval does
    ("a   b", "a  b"),
    ("x [NeV] y", "x [NeV] y"),  # v2.2 no longer strips bracketed text
    ("line1\nline2", "line1\nline2"),
    ("\t tab \n", "tab"),
    ("ends [title]", "ends. "),
]


@pytest.mark.parametrize("text, expected", CLEAN_CASES, ids=[repr(c[0]) for c in CLEAN_CASES])
def test_clean(text, expected):
    assert gpqa.clean(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        None,
        "",
        "  padded  ",
        "Intro [title] Rest",
        "a    b",
        "x [NeV] y",
        "ends [title]",
        "A [title]  B  [title] C",
        " \u00a0nbsp\u00a0 ",
        "line1\n\nline2 ",
    ],
)
def test_clean_equals_lm_eval_preprocess(text):
    from lm_eval.tasks.gpqa.cot_zeroshot.utils import preprocess

    assert gpqa.clean(text) == preprocess(text)


def test_clean_keeps_numbers_as_text():
    assert gpqa.clean(46) == "46" and gpqa.clean(0.5) == "0.5"


# --- the rendered prompt ----------------------------------------------------------------------------------


class _TagLoader(yaml.SafeLoader):
    pass


_TagLoader.add_constructor("!function", lambda loader, node: loader.construct_scalar(node))


def test_stock_template_is_the_one_we_target():
    config = yaml.load(STOCK_COT_YAML.read_text(encoding="utf-8"), Loader=_TagLoader)
    assert config["doc_to_text"] == COT_TEMPLATE
    assert config["doc_to_target"] == "answer"


def _assert_prompt_shows_target(prompt: str, target: str, correct: str) -> None:
    lines = prompt.split("\n")
    choice_lines = [line for line in lines if line[:4] in ("(A) ", "(B) ", "(C) ", "(D) ")]
    assert [line[:4] for line in choice_lines] == ["(A) ", "(B) ", "(C) ", "(D) "]
    holding = [line[1] for line in choice_lines if line[4:] == correct]
    assert holding == [target[1]]


@pytest.mark.parametrize("seed", [0, 3])
def test_jinja_rendered_prompt_shows_the_correct_answer_at_the_target_letter(seed):
    for i, row in enumerate(ROWS):
        doc = gpqa.make_doc(row, i, seed)
        prompt = apply_template(COT_TEMPLATE, doc)
        _assert_prompt_shows_target(prompt, doc["answer"], row["Correct Answer"])


def _build_task(tmp_path: Path, source: DataSource, seed: int, name: str = "gpqa_diamond_smoke"):
    """Our GPQA task as lm-eval builds it: the YAML we write, TaskManager, our custom_dataset hook."""
    from lm_eval.tasks import TaskManager

    spec = TASKS[name]
    folder = write_task_yamls([spec], {spec.name: source}, tmp_path / f"tasks-{seed}", seed)
    manager = TaskManager(include_path=str(folder), include_defaults=False)
    return manager.load([spec.lm_eval_name])["tasks"][spec.lm_eval_name]


def _eval_docs(task) -> list[dict]:
    return list(task.test_docs() if task.has_test_docs() else task.validation_docs())


@pytest.mark.parametrize("seed", [0, 1])
def test_lm_eval_task_prompt_shows_the_correct_answer_at_the_target_letter(tmp_path, seed):
    source = DataSource("synthetic", "csv", {"train": str(write_csv(tmp_path / "gpqa_diamond.csv", ROWS))})
    task = _build_task(tmp_path, source, seed)
    docs = _eval_docs(task)
    assert len(docs) == len(ROWS)
    correct_by_id = {r["Record ID"]: r["Correct Answer"] for r in ROWS}
    for doc in docs:
        prompt = task.doc_to_text(doc)
        target = task.doc_to_target(doc)
        assert prompt == apply_template(COT_TEMPLATE, doc)  # the stock prompt, unchanged
        assert target == doc["answer"]
        _assert_prompt_shows_target(prompt, target, correct_by_id[doc["Record ID"]])
        assert (
            doc["answer"]
            == gpqa.make_doc(next(r for r in ROWS if r["Record ID"] == doc["Record ID"]), 0, seed)["answer"]
        )


def test_lm_eval_task_docs_are_stable_across_builds_and_change_with_seed(tmp_path):
    """lm-eval calls process_docs / builds docs several times per run; our docs must not reshuffle."""
    source = DataSource("synthetic", "csv", {"train": str(write_csv(tmp_path / "gpqa_diamond.csv", ROWS))})
    first = [d["answer"] for d in _eval_docs(_build_task(tmp_path, source, 0))]
    again = [d["answer"] for d in _eval_docs(_build_task(tmp_path / "again", source, 0))]
    other = [d["answer"] for d in _eval_docs(_build_task(tmp_path / "other", source, 1))]
    assert first == again
    assert sum(a != b for a, b in zip(first, other, strict=True)) >= 25  # 3/4 expected to move


def test_smoke_task_prompts(tmp_path):
    spec = TASKS["gpqa_diamond_smoke"]
    source = source_for(spec, None)
    task = _build_task(tmp_path, source, 0)
    with open(source.files["train"], encoding="utf-8", newline="") as f:
        correct_by_id = {r["Record ID"]: gpqa.clean(r["Correct Answer"]) for r in csv.DictReader(f)}
    docs = _eval_docs(task)
    assert len(docs) == len(correct_by_id) >= 5
    for doc in docs:
        _assert_prompt_shows_target(task.doc_to_text(doc), task.doc_to_target(doc), correct_by_id[doc["Record ID"]])


# --- read_rows / load_dataset on synthetic files ----------------------------------------------------------


def test_read_rows_csv_keeps_strings(tmp_path):
    rows = [dict(synthetic_row(i), **{"Correct Answer": str(40 + i), "Incorrect Answer 1": "0.50"}) for i in range(3)]
    path = write_csv(tmp_path / "d.csv", rows)
    got = gpqa.read_rows("csv", str(path), None)
    assert [r["Correct Answer"] for r in got] == ["40", "41", "42"]
    assert all(r["Incorrect Answer 1"] == "0.50" for r in got)


def test_read_rows_csv_with_embedded_newlines(tmp_path):
    row = synthetic_row(2)
    row["Question"] = "First invented line.\nSecond invented line, with a comma."
    path = write_csv(tmp_path / "d.csv", [row, synthetic_row(3)])
    got = gpqa.read_rows("csv", str(path), None)
    assert len(got) == 2 and got[0]["Question"] == row["Question"]


def test_read_rows_missing_column(tmp_path):
    columns = [c for c in COLUMNS if c != "Incorrect Answer 3"]
    rows = [{k: v for k, v in synthetic_row(0).items() if k in columns}]
    path = write_csv(tmp_path / "d.csv", rows, columns)
    with pytest.raises(UserError, match="missing columns Incorrect Answer 3"):
        gpqa.read_rows("csv", str(path), None)


def test_read_rows_no_rows(tmp_path):
    path = write_csv(tmp_path / "d.csv", [])
    with pytest.raises(UserError, match="no rows"):
        gpqa.read_rows("csv", str(path), None)


def test_read_rows_zip_layout(tmp_path):
    """An unencrypted zip in the official layout reads the same way (the password is then simply unused)."""
    with open(write_csv(tmp_path / "d.csv", ROWS[:4]), encoding="utf-8") as f:
        text = f.read()
    good = tmp_path / "good.zip"
    with zipfile.ZipFile(good, "w") as z:
        z.writestr("dataset/gpqa_diamond.csv", text)
    assert [r["Record ID"] for r in gpqa.read_rows("gpqa-zip", str(good), None)] == [r["Record ID"] for r in ROWS[:4]]

    wrong = tmp_path / "wrong.zip"
    with zipfile.ZipFile(wrong, "w") as z:
        z.writestr("gpqa_diamond.csv", text)
    with pytest.raises(UserError, match="not the official GPQA zip layout"):
        gpqa.read_rows("gpqa-zip", str(wrong), None)
    notzip = tmp_path / "not.zip"
    notzip.write_text("plain text", encoding="utf-8")
    with pytest.raises(UserError, match="not the official GPQA zip layout"):
        gpqa.read_rows("gpqa-zip", str(notzip), None)


def test_read_rows_unknown_builder():
    with pytest.raises(ValueError, match="unknown GPQA source"):
        gpqa.read_rows("json", "/x", None)


def test_load_dataset_hook_on_synthetic_rows(tmp_path):
    path = write_csv(tmp_path / "d.csv", ROWS)
    data = gpqa.load_dataset(builder="csv", path=str(path), hub=None, shuffle_seed=2)
    assert list(data) == ["train"]
    docs = list(data["train"])
    assert [d["Record ID"] for d in docs] == [r["Record ID"] for r in ROWS]
    assert docs == [gpqa.make_doc(r, i, 2) for i, r in enumerate(ROWS)]


# --- the real zip (read in memory only; counts and hashes only) -------------------------------------------

needs_real_zip = pytest.mark.skipif(not REAL_ZIP.is_file(), reason=f"{REAL_ZIP} not present")


@needs_real_zip
def test_real_zip_rows():
    rows = gpqa.read_rows("gpqa-zip", str(REAL_ZIP), None)
    assert len(rows) == 198
    missing = [c for c in (*gpqa.REQUIRED_COLUMNS, "Record ID") if c not in rows[0]]
    assert missing == []
    num_ids = len({r["Record ID"] for r in rows if r["Record ID"]})
    assert num_ids == 198  # record ids are unique and present


@needs_real_zip
def test_real_zip_docs_are_deterministic():
    first = gpqa.load_dataset(builder="gpqa-zip", path=str(REAL_ZIP), shuffle_seed=0)["train"]
    second = gpqa.load_dataset(builder="gpqa-zip", path=str(REAL_ZIP), shuffle_seed=0)["train"]
    other = gpqa.load_dataset(builder="gpqa-zip", path=str(REAL_ZIP), shuffle_seed=1)["train"]
    docs1, docs2, docs3 = list(first), list(second), list(other)
    sizes = (len(docs1), len(docs2), len(docs3))
    assert sizes == (198, 198, 198)
    # hashes computed outside the assert: pytest would otherwise print the docs when explaining a failure
    hash1, hash2 = _sha(docs1), _sha(docs2)
    assert hash1 == hash2
    moved = sum(a["answer"] != c["answer"] for a, c in zip(docs1, docs3, strict=True))
    assert moved >= 100  # about 3/4 of 198 expected
    # every target letter indexes the cleaned correct answer (checked as a count, never as text)
    rows = gpqa.read_rows("gpqa-zip", str(REAL_ZIP), None)
    good = sum(
        d["choices"][gpqa.LETTERS.index(d["answer"][1])] == gpqa.clean(r["Correct Answer"])
        for d, r in zip(docs1, rows, strict=True)
    )
    assert good == 198
    letters = [d["answer"] for d in docs1]
    counts = [letters.count(f"({x})") for x in gpqa.LETTERS]
    assert all(30 <= c <= 70 for c in counts), counts


_SKIP_DIRS = {".venv", ".git", "__pycache__"}


def _text_files(root: Path):
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in _SKIP_DIRS]
        for name in filenames:
            path = Path(dirpath) / name
            try:
                data = path.read_bytes()
            except OSError:
                continue
            if b"\0" in data[:8192]:
                continue  # binary
            yield path, data.decode("utf-8", errors="ignore")


def _find_hits(root: Path, needles: list[tuple[int, str]]) -> tuple[int, list[str]]:
    """(files scanned, 'path (row i)' for every needle found); never the text itself."""
    hits: list[str] = []
    scanned = 0
    for path, text in _text_files(root):
        scanned += 1
        hits += [f"{path.relative_to(root)} (row {i})" for i, needle in needles if needle in text]
    return scanned, hits


def test_leak_scanner_finds_a_planted_synthetic_question(tmp_path):
    planted = synthetic_row(9)["Question"]
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "notes.md").write_text(f"intro\n{planted} and more\n", encoding="utf-8")
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / "copy.txt").write_text(planted, encoding="utf-8")  # skipped folder
    (tmp_path / "blob.bin").write_bytes(b"\0\1" + planted.encode())  # binary: skipped
    scanned, hits = _find_hits(tmp_path, [(0, "not there at all, nowhere"), (9, gpqa.clean(planted)[:80])])
    assert scanned == 1 and hits == ["pkg/notes.md (row 9)"]


@needs_real_zip
def test_no_real_gpqa_question_in_the_repository():
    """Report only the file and the row index on a hit, never the text."""
    rows = gpqa.read_rows("gpqa-zip", str(REAL_ZIP), None)
    needles = [(i, gpqa.clean(r["Question"])[:80]) for i, r in enumerate(rows)]
    needles = [(i, n) for i, n in needles if len(n) >= 20]  # a very short stem could collide with ordinary text
    num_needles = len(needles)  # outside the assert: pytest would otherwise print the list when explaining
    assert num_needles >= 190
    scanned, hits = _find_hits(REPO, needles)
    assert scanned >= 20
    assert not hits, "real GPQA question text found in: " + "; ".join(hits)


def test_gpqa_records_keep_only_the_letter_of_an_extraction():
    """lm-eval's strict-match keeps whatever follows "The answer is ", which may quote a choice: never stored."""
    from specdec_eval.evals.tasks.gpqa import gpqa_letter

    assert [gpqa_letter(x) for x in ["(D) some quoted choice", "(C", "B.", "[invalid]", "because of text"]] == [
        "(D)",
        "(C)",
        "(B)",
        "[invalid]",
        "[other]",
    ]
