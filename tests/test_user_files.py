"""Files the user names are read as regular files of bounded size (specdec_eval/user_files.py): a device, a FIFO or
a file beyond the limit is one line naming it, never an endless read (`waive --file /dev/full` grew a process to
12.9 GB), and every command that reads such a file says so with exit status 2."""

from __future__ import annotations

import os

import pytest

from specdec_eval.errors import UserError
from specdec_eval.user_files import check_regular, read_limited, read_limited_text

from .cli_helpers import run_cli

DEVICE = "/dev/zero"
needs_devices = pytest.mark.skipif(not os.path.exists(DEVICE) or not os.path.exists("/dev/full"), reason="no /dev")


def test_a_regular_file_within_the_limit_is_read(tmp_path):
    path = tmp_path / "f.txt"
    path.write_bytes(b"abc\n")
    assert read_limited(path, "thing") == b"abc\n"
    assert read_limited(path, "thing", limit=4) == b"abc\n"
    assert read_limited_text(path, "thing") == "abc\n"


def test_what_is_not_a_bounded_regular_file_is_one_line(tmp_path):
    big = tmp_path / "big.txt"
    big.write_bytes(b"x" * 10)
    with pytest.raises(UserError, match=r"thing .*big.txt: is 10 bytes, more than the 9 bytes read from such a file"):
        read_limited(big, "thing", limit=9)
    with pytest.raises(UserError, match="missing.txt: not found"):
        read_limited(tmp_path / "missing.txt", "thing")
    with pytest.raises(UserError, match="is a folder, not a regular file"):
        read_limited(tmp_path, "thing")
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"ok\n\xff")
    with pytest.raises(UserError, match=r"bad.txt:2:1: not valid UTF-8 \(byte 0xff\)"):
        read_limited_text(bad, "thing")


@needs_devices
def test_a_device_or_a_fifo_says_what_it_is(tmp_path):
    with pytest.raises(UserError, match="thing /dev/zero: is a character device, not a regular file"):
        read_limited(DEVICE, "thing")
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)  # opened non-blocking: no writer needed to find out what it is
    with pytest.raises(UserError, match="is a named pipe, not a regular file"):
        read_limited(fifo, "thing")
    with pytest.raises(UserError, match="is a character device"):
        check_regular("/dev/full", "thing")
    check_regular(tmp_path / "not-yet.txt", "thing")  # a name for a file to be made: fine


@needs_devices
@pytest.mark.parametrize(
    "argv, words",
    [
        (["waive", "t1", "--bug", "b", "--file", "/dev/full"], "waives file /dev/full: is a character device"),
        (["waives", "--file", DEVICE], "waives file /dev/zero: is a character device"),
        (["unwaive", "t1", "--file", DEVICE], "waives file /dev/zero: is a character device"),
        (["generate", DEVICE, "--model", "tiny"], "prompts file /dev/zero: is a character device"),
    ],
)
def test_commands_refuse_a_device_in_one_line(capsys, argv, words):
    code, _, err = run_cli(capsys, *argv)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and words in lines[0], err


@needs_devices
def test_acceptance_references_on_a_device_are_refused_before_the_run(capsys, tmp_path):
    code, _, err = run_cli(
        capsys,
        "run",
        "--model",
        "tiny",
        "--tasks",
        "gsm8k_smoke",
        "--no-reference",
        "--spec",
        "eagle3",
        "--acceptance-refs",
        DEVICE,
        "--out",
        str(tmp_path / "runs"),
    )
    assert code == 2 and err.strip() == (
        "specdec-eval: error: references file /dev/zero: is a character device, not a regular file"
    )
    assert not (tmp_path / "runs").exists()
