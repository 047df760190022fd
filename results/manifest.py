"""What a run's manifest records about where it ran: the code's commit, installed versions, devices, and the
command line, with its secrets redacted."""

from __future__ import annotations

import hashlib
import os
import platform
import re
import subprocess
import sys
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

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


# Options whose value is a secret (`--api-key KEY` or `--api-key=KEY`), and `name=value` pairs of the same kind
# inside one argument (lm-eval's `--model_args base_url=...,api_key=KEY`). Not `--model-key`: a reference key.
_SECRET_OPTION = re.compile(r"--(?:[\w-]*[-_])?(?:api[-_]?key|token|password|passwd|secret)", re.IGNORECASE)
_SECRET_PAIR = re.compile(r"((?:^|[,;&?\s])(?:[\w-]*[-_])?(?:api[-_]?key|token|password|passwd|secret)=)([^,;&\s]+)",
                          re.IGNORECASE)  # fmt: skip
# user[:password]@ in a URL: a password, or a token passed as the user name (https://TOKEN@host).
_URL_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)[^/@\s]+@")
REDACTED = "***"


def redact_argv(argv: Sequence[str]) -> list[str]:
    """The command line as a manifest may record it: the value of every secret option (`--api-key KEY`,
    `--api-key=KEY`), `api_key=KEY`-style pairs, and the user and password of every URL (`http://u:p@host`)
    replaced by ***. Everything else is kept verbatim, so the command still says what ran."""
    out: list[str] = []
    secret_next = False
    for arg in argv:
        arg = str(arg)
        if secret_next:
            out.append(REDACTED)
            secret_next = False
            continue
        option, eq, _ = arg.partition("=")
        if _SECRET_OPTION.fullmatch(option):
            if eq:
                out.append(f"{option}={REDACTED}")
            else:
                out.append(arg)
                secret_next = True
            continue
        arg = _URL_USERINFO.sub(rf"\g<1>{REDACTED}@", arg)
        out.append(_SECRET_PAIR.sub(rf"\g<1>{REDACTED}", arg))
    return out


def command_line(argv: Sequence[str] | None = None) -> list[str]:
    """This process's command line (sys.argv), secrets redacted (`redact_argv`): what a manifest records."""
    return redact_argv(sys.argv if argv is None else argv)
