"""A folder written as a whole (an export): its place checked before the work that fills it, its files written
into a hidden staging folder beside it, then moved into place, every file with one mode.

Why staged: a failure halfway (a model that does not load, a full disk) leaves the target as it was, and a refused
target (a dangling link, a path under a file, a place nobody may write such as /proc) is found before the work, by
making the staging folder itself. Why `stale`: a `--force` export into an earlier export's folder must not leave
that export's other files behind (a shard index naming shards that are gone makes the folder unloadable)."""

from __future__ import annotations

import fnmatch
import os
import secrets
import shutil
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from ..errors import UserError


def default_mode() -> int:
    """What a new file gets from `open(path, "w")`: 0666 minus the umask."""
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def check_target(folder: Path, force: bool) -> Path:
    """The folder to fill (a link to a folder resolved), or UserError in one line: a file, a dangling link, a
    folder that holds something (unless `force`)."""
    folder = Path(os.path.abspath(folder))
    if folder.is_symlink() and not folder.exists():
        raise UserError(f"{folder} is a link to {os.readlink(folder)}, which does not exist; give a folder")
    folder = folder.resolve() if folder.is_symlink() else folder
    try:
        is_dir = folder.is_dir()
        exists = folder.exists()
    except OSError as e:
        raise UserError(f"{folder}: cannot be read ({e.strerror or e})") from None
    if exists and not is_dir:
        raise UserError(f"{folder} is a file; give a folder to write into")
    if is_dir:
        try:
            full = any(folder.iterdir())
        except OSError as e:
            raise UserError(f"{folder}: cannot be read ({e.strerror or e})") from None
        if full and not force:
            raise UserError(f"{folder} is not empty; choose an empty folder or pass --force to overwrite")
    return folder


@contextmanager
def staged_folder(folder: Path, force: bool, stale: Sequence[str] = ()) -> Iterator[Path]:
    """A staging folder to write into; when the block ends without an exception its files replace those of the
    same names in `folder`, and the files of `folder` matching a `stale` pattern are removed first. The target is
    checked (`check_target`) and the staging folder made before the block runs: a place that cannot be written is
    one line, before any work."""
    target = check_target(folder, force)
    staging = target.parent / f".{target.name}.staging-{secrets.token_hex(4)}"
    try:
        staging.mkdir(parents=True)
    except OSError as e:
        raise UserError(f"{target}: cannot be written ({e.strerror or e})") from None
    try:
        yield staging
        _publish(staging, target, stale)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _publish(staging: Path, target: Path, stale: Sequence[str]) -> None:
    mode = default_mode()
    files = sorted(p for p in staging.rglob("*") if p.is_file())
    for path in files:
        os.chmod(path, mode)  # one mode for every file, whatever the library that wrote it chose
    target.mkdir(parents=True, exist_ok=True)
    new = {p.relative_to(staging).as_posix() for p in files}
    for old in sorted(target.iterdir()):  # its own level only: never a file in a folder below it
        if old.is_file() and old.name not in new and any(fnmatch.fnmatch(old.name, p) for p in stale):
            old.unlink()
    for path in files:
        dest = target / path.relative_to(staging)
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(path, dest)
