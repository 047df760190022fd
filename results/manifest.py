"""What a run's manifest records about where it ran: the code's commit, installed versions, devices, and the
command line, with its secrets redacted."""

from __future__ import annotations

import hashlib
import os
import platform
import subprocess
import sys
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from ..redaction import redact_argv

CODE_DIR = Path(__file__).resolve().parent.parent  # the checkout this package runs from (editable install)


def git_state(repo: Path | None = None) -> dict[str, Any]:
    """Commit and dirty flag of the code that ran, and for a dirty tree a hash of what is uncommitted (the diff of
    tracked files against HEAD, and the untracked files that git does not ignore, by content), so that runs of a
    modified tree never pair with runs of the clean commit; None values outside a git checkout. `ab` runs a side
    from an installed copy and names its worktree in SPECDEC_EVAL_SOURCE_DIR."""
    repo = repo or Path(os.environ.get("SPECDEC_EVAL_SOURCE_DIR") or CODE_DIR)

    def git(*args: str) -> bytes | None:
        try:
            out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return out.stdout if out.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no")
    diff, untracked = git("diff", "HEAD", "--binary"), git("ls-files", "--others", "--exclude-standard", "-z")
    dirty = bool(status.strip() or untracked) if status is not None and untracked is not None else None
    digest = None
    if dirty and diff is not None:
        h = hashlib.sha256(diff)
        for name in sorted(n for n in untracked.split(b"\0") if n):
            path = repo / name.decode("utf-8", "surrogateescape")
            h.update(name + b"\0" + (path.read_bytes() if path.is_file() else b""))
        digest = h.hexdigest()[:16]
    return {"commit": commit.decode().strip() if commit else None, "dirty": dirty, "diff_sha256": digest}


def versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"python": sys.version.split()[0]}
    for dist in ("specdec-eval", "torch", "transformers", "lm_eval", "datasets", "gguf"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


def devices() -> dict[str, Any]:
    info: dict[str, Any] = {"host": platform.node(), "cpu": platform.processor() or platform.machine()}
    try:
        import torch

        if torch.cuda.is_available():
            info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    except ImportError:
        pass
    return info


def command_line(argv: Sequence[str] | None = None) -> list[str]:
    """This process's command line (sys.argv), secrets redacted (`redact_argv`): what a manifest records."""
    return redact_argv(sys.argv if argv is None else argv)
