"""Who writes which run: one writer per run folder, so two identical commands never both do the work.

    run, resumed = claims.acquire_run(out, key, resume)  # resume: None (if possible) | True (must) | False (fresh)
    with run:                                            # the run's lock is released when the block ends
        run.write_manifest(...)
        ...                                              # evaluate, record, write summary.json

`acquire_run` claims or creates under the store-wide lock (`store.store_lock`, held for milliseconds), so two identical
commands started together cannot both start a new run. When every unfinished run of the key is held by a live process it
raises `RunBusyError` (a ValueError: one line for the user) instead of repeating that work; resume=False always starts a
new run, as the user asked. The pieces: `claim_unfinished(root, key)` returns the newest unfinished run of the key that
it could lock (locked), skipping runs a live process holds and runs whose manifest is not written yet;
`busy_runs(root, key)` lists the unfinished runs of the key that another holder has locked; `store.new_run(root, key)`
creates a run, locked. A lock lives as long as the `Run` object holding it; a forked child that keeps the file open
shares it, a subprocess does not.
"""

from __future__ import annotations

from pathlib import Path

from .store import Run, create_run, list_runs, parse_run_id, store_lock

# How long a claim waits for a lock that an `is_locked` probe (of `runs`, say) may be holding for microseconds.
_CLAIM_WAIT_S = 0.2


class RunBusyError(ValueError):
    """Another live process is writing the unfinished run this command would resume."""


def _claim(root: str | Path, key: str) -> Run | None:
    for run in reversed(list_runs(root)):
        if run.is_finished or run.key != key:
            continue
        if run.try_lock(_CLAIM_WAIT_S) is None:
            continue  # a live writer has it
        if run.is_finished:  # finished between the listing and the lock
            run.release()
            continue
        return run
    return None


def busy_runs(root: str | Path, key: str) -> list[Run]:
    """Unfinished runs of the key whose lock another holder has (a live process is writing them), oldest first."""
    base = Path(root)
    if not base.is_dir():
        return []
    folders = sorted(p for p in base.iterdir() if p.is_dir() and parse_run_id(p.name)[1] == key)
    return [Run(p) for p in folders if not (p / "summary.json").exists() and Run(p).is_locked()]


def claim_unfinished(root: str | Path, key: str) -> Run | None:
    """The newest unfinished run of the key that no live process holds, locked; None if there is none."""
    with store_lock(root):
        return _claim(root, key)


def acquire_run(root: str | Path, key: str, resume: bool | None = None) -> tuple[Run, bool]:
    """(locked run, resumed) for a command that writes a run of the configuration key.

    resume None: claim the newest free unfinished run, else start a new one; True: claim one or raise
    FileNotFoundError; False: always a new run. When resume is not False and the key's unfinished runs are all
    held by live processes, RunBusyError: the command would repeat their work.
    """
    with store_lock(root):
        if resume is not False:
            run = _claim(root, key)
            if run is not None:
                return run, True
            busy = busy_runs(root, key)
            if busy:
                held = busy[-1]
                pid = held.holder_pid()
                by = f" by process {pid}" if pid else ""
                raise RunBusyError(
                    f"run {held.run_id} of this configuration is being written{by} under {root}; wait for it to "
                    "finish (then this command reuses it), or pass --fresh to run it again anyway"
                )
            if resume:
                raise FileNotFoundError(f"--resume: no unfinished run of this configuration under {root}")
        return create_run(root, key), False
