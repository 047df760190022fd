"""The record layer: the one way a command keeps something on disk and reads it back (a run's files, a sweep's
plan and cells, an export, a report).

- Writes are atomic (`atomic`): a reader sees the old file or the new one, never a torn one.
- A record that holds a command (a run's manifest, a sweep's plan and cells) is written with `holds_commands`:
  every secret in it (`--api-key KEY`, `--api-key=KEY`, `HF_TOKEN=...` before a command, inside a `--serve-cmd`
  string too, a value under a secret's name) is replaced before a byte reaches disk, and the file is owner-only
  (0600). A resume compares such records in their redacted form (`scrub`).
- One writer per folder (`locks`): a lock the operating system drops when its holder dies.
- File names made from user text (`names.file_name`): no two texts share a name, no name is too long.
- A reader (`json_files.read_json`) answers a damaged record (torn, not UTF-8, not JSON, a device) with one line
  (`RecordError`, shown by the CLI with exit status 2), never a traceback.
- A folder written as a whole (`folders`: an export) is checked before the work that fills it, staged beside its
  place, and replaces the files of an earlier one (no stale file left), every file with one mode.

A leaf package (it imports only `errors`, `redaction` and `user_files`), so every folder may use it."""

from .atomic import atomic_open, atomic_write
from .json_files import PRIVATE, RecordError, read_json, read_text, scrub, write_json
from .names import file_name

__all__ = [
    "PRIVATE",
    "RecordError",
    "atomic_open",
    "atomic_write",
    "file_name",
    "read_json",
    "read_text",
    "scrub",
    "write_json",
]
