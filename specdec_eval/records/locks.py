"""Advisory file locks (`fcntl.flock`) on sidecar lock files: one writer per run folder, one editor of waives.txt.

A lock belongs to the open file behind a `FileLock`; it is released by `release()`, by leaving the `with` block,
when the object is garbage-collected, and by the operating system when the process dies (SIGKILL included), so a
crashed writer never leaves a stale lock behind. Lock files themselves are never deleted: deleting one while
another process waits on it would let two processes hold "the" lock at once.

Only processes that use these functions are excluded (advisory locking). flock works across processes on one
host and, on Linux, on NFS (where the kernel maps it onto NFS byte-range locks).
"""

from __future__ import annotations

import errno
import fcntl
import os
import time
from pathlib import Path
from typing import IO

_POLL_S = 0.02


class FileLock:
    """An exclusive lock held on `path` until released; records the holder's pid in the file for messages."""

    def __init__(self, path: Path, file: IO[str]) -> None:
        self.path = path
        self._file: IO[str] | None = file
        file.seek(0)
        file.truncate()
        file.write(f"{os.getpid()}\n")
        file.flush()

    @property
    def held(self) -> bool:
        return self._file is not None

    def release(self) -> None:
        if self._file is not None:
            try:
                fcntl.flock(self._file.fileno(), fcntl.LOCK_UN)
            finally:
                self._file.close()
                self._file = None

    def __enter__(self) -> FileLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"FileLock({str(self.path)!r}, held={self.held})"


def _open(path: Path) -> IO[str]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o666)
    return open(fd, "r+", encoding="ascii", errors="replace")


def try_lock(path: str | os.PathLike, wait_s: float = 0.0) -> FileLock | None:
    """The exclusive lock on `path` (created if missing), or None if another holder keeps it for wait_s seconds.

    A short wait rides over a concurrent `is_locked` probe, which holds the lock for microseconds.
    """
    path = Path(path)
    file = _open(path)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            return FileLock(path, file)
        except OSError as e:
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                file.close()
                raise
        if time.monotonic() >= deadline:
            file.close()
            return None
        time.sleep(_POLL_S)


def lock(path: str | os.PathLike) -> FileLock:
    """The exclusive lock on `path` (created if missing), waiting as long as another process holds it."""
    path = Path(path)
    file = _open(path)
    try:
        fcntl.flock(file.fileno(), fcntl.LOCK_EX)
    except BaseException:
        file.close()
        raise
    return FileLock(path, file)


def is_locked(path: str | os.PathLike) -> bool:
    """Whether some open file (another process, or another FileLock of this one) holds the lock on `path`."""
    path = Path(path)
    if not path.exists():
        return False
    try:
        file = open(path, encoding="ascii", errors="replace")  # noqa: SIM115  (closed below)
    except OSError:
        return False
    with file:
        try:
            fcntl.flock(file.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                return True
            raise
        fcntl.flock(file.fileno(), fcntl.LOCK_UN)
        return False


def holder_pid(path: str | os.PathLike) -> int | None:
    """The pid the last holder wrote into the lock file (for messages only: it may have exited since)."""
    try:
        text = Path(path).read_text(encoding="ascii", errors="replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
