"""Running the command line in-process, as the tests of each command do."""

from __future__ import annotations

import io
import sys

from specdec_eval.cli.main import main


def run_cli(capsys, *argv: str, stdin: str | None = None, monkeypatch=None) -> tuple[int, str, str]:
    """`specdec-eval ARGV` through main(): (exit status, stdout, stderr). A non-integer SystemExit code (a message)
    counts as status 1, as the interpreter would exit with. `stdin` needs `monkeypatch`."""
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    try:
        main(list(argv))
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    out, err = capsys.readouterr()
    return code, out, err
