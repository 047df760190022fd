"""Atomic file replacement: the one way results/ writes a file (run files, samples, waives.txt).

The new content goes to a temporary file in the target's folder, is flushed and fsynced, and then renamed over
the target (`os.replace`, atomic on POSIX within one file system), and the folder is fsynced so that the rename
survives a crash. A reader sees the old file or the new one, never a torn one; a writer killed halfway leaves the
target untouched and at most a hidden `.<name>.<random>.tmp` file beside it.

Permissions: a new file gets what `open(path, "w")` would give it, 0666 minus the umask (0644 under the usual
umask 022), the same as the files appended to in a run's partial/ folder. `mode=` sets exact permissions instead
(the waives file keeps those of the file it replaces).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)


@contextmanager
def atomic_open(path: str | os.PathLike, mode: int | None = None) -> Iterator[BinaryIO]:
    """A binary file object whose content replaces `path` when the block ends without an exception.

    On an exception the temporary file is removed and `path` stays as it was. The parent folder is created if
    missing. mode: exact permission bits for the new file (default: 0666 minus the umask).
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}.{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, _CREATE_FLAGS, 0o666)  # the kernel applies the umask, as for any new file
    try:
        with os.fdopen(fd, "wb") as f:
            if mode is not None:
                os.fchmod(f.fileno(), mode)  # exact bits, umask or not
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_folder(target.parent)


def atomic_write(path: str | os.PathLike, data: bytes, mode: int | None = None) -> None:
    """Replace `path` with `data` atomically (see the module docstring)."""
    with atomic_open(path, mode) as f:
        f.write(data)


def _fsync_folder(folder: Path) -> None:
    """Make the rename durable; a file system that cannot fsync a folder only loses that guarantee."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
