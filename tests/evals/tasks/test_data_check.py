"""Schema checks of local data files (evals/tasks/data_check.py): each problem is one UserError naming the file, the
line (and column) and what was expected; good files give their row count. Synthetic fixtures only (no GPQA text)."""

from __future__ import annotations

import json
import zipfile

import pytest
from specdec_eval.evals.tasks.data_check import check_table
from specdec_eval.evals.tasks.gpqa import GPQA_ZIP_MEMBER, gpqa_source
from specdec_eval.evals.tasks.gsm8k import gsm8k_source
from specdec_eval.evals.tasks.registry import TASKS, max_fewshot, source_for

from specdec_eval.errors import UserError

COLS = ("question", "answer")
GPQA_HEADER = "Question,Correct Answer,Incorrect Answer 1,Incorrect Answer 2,Incorrect Answer 3\n"


def _file(tmp_path, name: str, data: str | bytes):
    path = tmp_path / name
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def test_good_json_lines_and_array_give_their_row_count(tmp_path):
    row = {"question": "q", "answer": "a", "extra": 1}
    assert check_table(_file(tmp_path, "a.jsonl", (json.dumps(row) + "\n") * 3 + "\n"), "json", COLS) == 3
    assert check_table(_file(tmp_path, "b.json", json.dumps([row, row])), "json", COLS) == 2


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ('{"question": "q"}\n', r"t.jsonl:1: missing 'answer' \(expected 'question' and 'answer'; has 'question'\)"),
        ('{"question": "q", "answer": "a"}\n{"question": "q", "answer": 4}\n', r"t.jsonl:2: 'answer' must be a str"),
        ('{"question": "q", "answer": "a"}\n[1, 2]\n', r"t.jsonl:2: expected a JSON object"),
        ('{"question": "q", "answer": "a"}\n{"question": "q",\n', r"t.jsonl:2:18: not valid JSON"),
        ("", r"t.jsonl: no rows \(expected JSON lines"),
        ("\n  \n", r"t.jsonl: no rows"),
        (b'{"question": "\xc3(", "answer": "a"}\n', r"t.jsonl:1:15: not valid UTF-8 \(byte 0xc3\)"),
        ('[{"question": "q", "answer": "a"}, {"answer": "b"}]', r"t.jsonl: item 1: missing 'question'"),
        ('[{"question": "q",', r"t.jsonl:1:19: not valid JSON"),
    ],
)
def test_bad_json_files_name_file_line_and_expectation(tmp_path, data, message):
    with pytest.raises(UserError, match=message):
        check_table(_file(tmp_path, "t.jsonl", data), "json", COLS)


def test_csv_and_parquet(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    assert check_table(_file(tmp_path, "g.csv", "question,answer\nq,a\n"), "csv", COLS) == 1
    with pytest.raises(UserError, match=r"b.csv:1: missing columns 'answer' in the header \(has 'question', 'x'\)"):
        check_table(_file(tmp_path, "b.csv", "question,x\nq,a\n"), "csv", COLS)
    with pytest.raises(UserError, match=r"r.csv:3: no value in column 'answer'"):
        check_table(_file(tmp_path, "r.csv", "question,answer\nq,a\nq\n"), "csv", COLS)
    pq.write_table(pa.table({"question": ["q"], "answer": ["a"]}), tmp_path / "g.parquet")
    assert check_table(tmp_path / "g.parquet", "parquet", COLS) == 1
    pq.write_table(pa.table({"question": ["q"], "answer": [1]}), tmp_path / "n.parquet")
    with pytest.raises(UserError, match="column 'answer' must hold strings"):
        check_table(tmp_path / "n.parquet", "parquet", COLS)
    with pytest.raises(UserError, match="not a readable parquet file"):
        check_table(_file(tmp_path, "x.parquet", "not parquet"), "parquet", COLS)
    with pytest.raises(UserError, match="expected a data file, found a folder"):
        check_table(tmp_path, "json", COLS)


def test_a_changed_file_is_checked_again(tmp_path):
    path = _file(tmp_path, "t.jsonl", '{"question": "q", "answer": "a"}\n')
    assert check_table(path, "json", COLS) == 1
    path.write_text('{"question": "q"}\n')
    with pytest.raises(UserError, match="missing 'answer'"):
        check_table(path, "json", COLS)


def test_gsm8k_source_checks_both_splits_and_counts_rows(tmp_path):
    (tmp_path / "gsm8k").mkdir()
    good = json.dumps({"question": "q", "answer": "#### 1"}) + "\n"
    (tmp_path / "gsm8k" / "train.jsonl").write_text(good * 4)
    (tmp_path / "gsm8k" / "test.jsonl").write_text(good)
    src = gsm8k_source(str(tmp_path))
    assert src.num_rows == {"train": 4, "test": 1}
    assert max_fewshot(TASKS["gsm8k"], src) == 4
    (tmp_path / "gsm8k" / "train.jsonl").write_text('{"question": "q", "solution": "1"}\n')
    with pytest.raises(UserError, match=r"train.jsonl:1: missing 'answer'"):
        gsm8k_source(str(tmp_path))


def test_gpqa_csv_and_zip_sources_are_checked(tmp_path):
    folder = tmp_path / "gpqa"
    folder.mkdir()
    (folder / "gpqa_diamond.csv").write_text(GPQA_HEADER + "Q1?,right,w1,w2,w3\nQ2?,right,w1,w2,w3\n")
    src = gpqa_source(str(tmp_path))
    assert src.num_rows == {"train": 2} and max_fewshot(TASKS["gpqa_diamond"], src) == 1
    (folder / "gpqa_diamond.csv").write_text("Question,Answer\nQ?,a\n")
    with pytest.raises(UserError, match=r"gpqa_diamond.csv:1: missing columns 'Correct Answer'"):
        gpqa_source(str(tmp_path))
    (folder / "gpqa_diamond.csv").unlink()
    with zipfile.ZipFile(folder / "dataset.zip", "w") as z:  # unencrypted: reading with a password still works
        z.writestr(GPQA_ZIP_MEMBER, GPQA_HEADER)
    with pytest.raises(UserError, match=r"dataset.zip!dataset/gpqa_diamond.csv: no rows after the header"):
        gpqa_source(str(tmp_path))
    (folder / "dataset.zip").write_bytes(b"PK not a zip")
    with pytest.raises(UserError, match="not the official GPQA zip layout"):
        gpqa_source(str(tmp_path))


def test_the_shipped_smoke_data_passes_its_checks():
    for name in ("gsm8k_smoke", "gpqa_diamond_smoke"):
        src = source_for(TASKS[name], None)
        assert src.num_rows["train"] > 0
