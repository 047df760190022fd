"""JSON records: written atomically (secrets scrubbed and owner-only when they hold a command), read back with one
line for anything damaged."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..redaction import REDACTED, SECRET_NAME, redact_argv, redact_text
from ..user_files import TEXT_LIMIT, read_limited
from .atomic import atomic_write

PRIVATE = 0o600  # a file that holds a command: only its owner reads it, whatever the umask
_SECRET_KEY = re.compile(SECRET_NAME, re.IGNORECASE)


class RecordError(UserError, ValueError):
    """A record that exists but cannot be read (torn, not UTF-8, not JSON, not an object, a device): one line,
    its path first."""


def scrub(value: Any) -> Any:
    """`value` with every secret replaced by ***: a list of strings as a command line (`redact_argv`: the word
    after `--api-key` too), any other string as a line of text (`HF_TOKEN=...`, `--api-key=...`, URL passwords),
    and the string under a key named like a secret (`{"HF_TOKEN": ...}`, an environment)."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {
            k: REDACTED if isinstance(v, str) and v and _SECRET_KEY.fullmatch(str(k)) else scrub(v)
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        if value and all(isinstance(v, str) for v in value):
            return redact_argv(value)
        return [scrub(v) for v in value]
    return value


def write_json(
    path: str | os.PathLike,
    obj: Any,
    *,
    holds_commands: bool = False,
    sort_keys: bool = False,
    default: Callable[[Any], Any] | None = None,
) -> None:
    """Write `obj` as indented JSON, atomically. holds_commands: scrub it (`scrub`) and make the file owner-only."""
    if holds_commands:
        obj = scrub(json.loads(json.dumps(obj, default=default)))  # plain JSON values first: tuples, dataclasses
    text = json.dumps(obj, indent=2, sort_keys=sort_keys, default=default) + "\n"
    atomic_write(path, text.encode("utf-8"), mode=PRIVATE if holds_commands else None)


def read_text(path: str | os.PathLike, limit: int = TEXT_LIMIT) -> str:
    """A record's text: a regular file of at most `limit` bytes, UTF-8; RecordError "PATH: why" otherwise."""
    path = Path(path)
    if path.is_dir():
        raise RecordError(f"{path}: is a folder, not a file")
    try:
        data = read_limited(path, "record", limit)
    except UserError as e:
        raise RecordError(str(e).removeprefix("record ")) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise RecordError(f"{path}: not UTF-8 text (byte {e.start})") from None


def read_json(path: str | os.PathLike, limit: int = TEXT_LIMIT) -> dict[str, Any]:
    """A record holding one JSON object; FileNotFoundError when there is none, RecordError when it is damaged."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist")
    text = read_text(path, limit)
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        what = "empty" if not text.strip() else f"not valid JSON ({e.msg} at line {e.lineno} column {e.colno})"
        raise RecordError(f"{path}: {what}") from None
    except RecursionError:
        raise RecordError(f"{path}: nested too deeply to be a record") from None
    if not isinstance(obj, dict):
        raise RecordError(f"{path}: holds a JSON {type(obj).__name__}, not an object")
    return obj
