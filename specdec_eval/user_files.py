"""Reading a file the user named (a waives file, references, prompts, a run's records): a regular file no larger
than a limit, or one line saying what it is instead. A leaf module (it imports only the error type), so every
package may use it.

Why a limit and a type check, not just `read_bytes()`: a device (/dev/zero, /dev/full, /dev/urandom) reads without
end and a FIFO blocks, so a mistyped path grew a process to 12.9 GB until the OOM killer ended it. The type is
checked on the opened descriptor (no race between the check and the read), and at most `limit + 1` bytes are read
whatever the file claims to hold (/proc files report a size of 0)."""

from __future__ import annotations

import os
import stat

from .errors import UserError

MiB = 2**20
# Defaults by kind of file: far above any real one of its kind, far below what would hurt the machine.
TEXT_LIMIT = 64 * MiB  # waives, references, prompts, a run's manifest / summary / events
DATA_LIMIT = 2**30  # evaluation data (a JSONL, CSV or zip of a benchmark)


def describe(path: str | os.PathLike) -> str | None:
    """What a path is when it is not a regular file ("a folder", "a character device", ...), None for a regular
    file. Raises FileNotFoundError when nothing is there."""
    return kind_of(os.stat(path).st_mode)


def kind_of(mode: int) -> str | None:
    if stat.S_ISREG(mode):
        return None
    for test, name in (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISFIFO, "a named pipe"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def read_limited(path: str | os.PathLike, what: str, limit: int = TEXT_LIMIT) -> bytes:
    """The bytes of `path`, a regular file of at most `limit` bytes; otherwise UserError "WHAT PATH: why" (missing,
    a folder, a device or pipe, too large, unreadable). `what` names the file for the user: "waives file",
    "acceptance references", ...

    The file is opened non-blocking (a FIFO would otherwise wait for a writer before the type could be checked)."""
    shown = f"{what} {path}"
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise UserError(f"{shown}: not found") from None
    except IsADirectoryError:
        raise UserError(f"{shown}: is a folder, not a regular file") from None
    except OSError as e:
        raise UserError(f"{shown}: cannot be read ({e.strerror or e})") from None
    try:
        info = os.fstat(fd)
        kind = kind_of(info.st_mode)
        if kind is not None:
            raise UserError(f"{shown}: is {kind}, not a regular file")
        if info.st_size > limit:
            raise UserError(f"{shown}: is {info.st_size} bytes, more than the {_size(limit)} read from such a file")
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(MiB, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise UserError(f"{shown}: holds more than the {_size(limit)} read from such a file")
        return b"".join(chunks)
    except IsADirectoryError:  # some systems open a folder read-only and fail only at read
        raise UserError(f"{shown}: is a folder, not a regular file") from None
    except OSError as e:
        raise UserError(f"{shown}: cannot be read ({e.strerror or e})") from None
    finally:
        os.close(fd)


def read_limited_text(path: str | os.PathLike, what: str, limit: int = TEXT_LIMIT) -> str:
    """`read_limited`, decoded as UTF-8 (a byte-order mark kept: a caller that cares reports it); the error names
    the line and column of the first bad byte."""
    return decode_utf8(read_limited(path, what, limit), f"{what} {path}")


def decode_utf8(data: bytes, where: str) -> str:
    """The text of a file that must be UTF-8; the error names the line and column of the first bad byte."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        column = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise UserError(f"{where}:{line}:{column}: not valid UTF-8 (byte 0x{data[e.start]:02x})") from None


def _size(n: int) -> str:
    return f"{n // MiB} MiB" if n % MiB == 0 else f"{n} bytes"


def check_regular(path: str | os.PathLike, what: str) -> None:
    """UserError when something other than a regular file is at `path` (a device, a pipe, a socket); nothing when
    the path is free (a file to be created) or holds a regular file. For a file that will be written, or read
    later: say it before anything else is done (a lock taken beside it, a model loaded)."""
    try:
        kind = describe(path)
    except OSError:
        return
    if kind is not None and kind != "a folder":  # callers say their own words for a folder
        raise UserError(f"{what} {path}: is {kind}, not a regular file")
