"""The record layer: a record that holds a command keeps none of its secrets and only its owner reads it; names
made from user text never collide or overflow; a damaged record is one line, never a traceback."""

from __future__ import annotations

import json
import os

import pytest

from specdec_eval.errors import UserError
from specdec_eval.records import RecordError, file_name, read_json, scrub, write_json

SECRETS = ("hf_SECRET1", "sk-SECRET2", "SECRET3", "SECRET4", "SECRET5", "SECRET6", "SECRET7")
SERVE = (
    "HF_TOKEN=hf_SECRET1 OPENAI_API_KEY=sk-SECRET2 AWS_SECRET_ACCESS_KEY='SECRET7 x' vllm serve m --api-key SECRET3 "
    "--port 8000"
)
COMMAND = ["run", "--serve-cmd", SERVE, "--api-key=SECRET4", "--api-key", "SECRET5", "--limit", "2"]


def test_a_record_holding_commands_is_scrubbed_and_owner_only(tmp_path):
    path = tmp_path / "cell.json"
    write_json(path, {"command": COMMAND, "serve_cmd": SERVE, "env": {"HF_TOKEN": "SECRET6"}}, holds_commands=True)
    text = path.read_text(encoding="utf-8")
    assert not [s for s in SECRETS if s in text], text
    assert (path.stat().st_mode & 0o777) == 0o600
    recorded = json.loads(text)
    assert recorded["command"][-2:] == ["--limit", "2"] and "vllm serve m --api-key *** --port 8000" in text
    assert scrub(recorded) == recorded  # a resume compares scrubbed forms: scrubbing twice changes nothing


def test_a_record_without_commands_keeps_the_usual_mode(tmp_path):
    mask = os.umask(0)
    os.umask(mask)
    write_json(tmp_path / "grid.json", {"cells": []})
    assert (tmp_path / "grid.json").stat().st_mode & 0o777 == 0o666 & ~mask


def test_names_never_collide_nor_overflow():
    assert file_name("batch=1", suffix=".json") == "batch=1.json"  # plain text is its own name
    assert file_name("batch=x+1") != file_name("batch=x_1")
    assert file_name("a b") != file_name("a_b") != file_name("a?b")
    long = file_name("x" * 300, suffix=".json")
    assert len(long.encode()) < 255 and long != file_name("x" * 299, suffix=".json")
    assert file_name("same", identity="1") != file_name("same", identity="2")
    assert not file_name("../up").startswith(".") and "/" not in file_name("a/b")


@pytest.mark.parametrize(
    "content, message",
    [
        (b'{"cell": "batch=1", "sta', "not valid JSON"),
        (b"", "empty"),
        (b'{"a": "\xff"}', "not UTF-8"),
        (b"[1, 2]", "holds a JSON list"),
        (b"[" * 100_000, "nested too deeply"),
    ],
)
def test_a_damaged_record_is_one_line(tmp_path, content, message):
    path = tmp_path / "r.json"
    path.write_bytes(content)
    with pytest.raises(RecordError) as e:
        read_json(path)
    assert message in str(e.value) and "\n" not in str(e.value) and isinstance(e.value, UserError)


def test_a_folder_or_a_device_is_not_a_record(tmp_path):
    with pytest.raises(RecordError, match="is a folder"):
        read_json(tmp_path)
    with pytest.raises(RecordError, match="not a regular file"):
        read_json("/dev/zero")
    with pytest.raises(FileNotFoundError):
        read_json(tmp_path / "none.json")
